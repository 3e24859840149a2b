"""YAML text written directly by the engines: scalars in the two styles they use, and
block-style documents of mappings and lists.

PyYAML's emitter takes seconds for the 8,192 KWOK nodes of a large fabric, writing the
text here takes a fraction of one; and topology.yaml must come out as topograph's
gopkg.in/yaml.v3 writes it, which no Python emitter's options reproduce.
"""

from __future__ import annotations

import json
import re

import yaml

_PLAIN_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def go_scalar(value) -> str:
    """A scalar for text that gopkg.in/yaml.v3 would write: booleans and integers bare,
    strings as PyYAML's flow style writes them (plain where YAML reads them back as the
    same string, else quoted), which is yaml.v3's text on topograph's expected files."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    if text.endswith("\n..."):
        text = text[:-4].rstrip()
    return text


def quoted_scalar(value) -> str:
    """A scalar with every string JSON-quoted: valid YAML, never reinterpreted as a
    number or a boolean."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(str(value))


def dump_all(documents: list[dict]) -> str:
    """Multi-document block YAML, strings JSON-quoted (``quoted_scalar``)."""
    out: list[str] = []
    for document in documents:
        out.append("---\n")
        _emit(document, 0, out)
    return "".join(out)


def _emit(node, indent: int, out: list[str]) -> None:
    pad = " " * indent
    if isinstance(node, dict):
        for key, value in node.items():
            key_text = key if _PLAIN_KEY.match(key) else json.dumps(key)
            if isinstance(value, dict) and value:
                out.append(f"{pad}{key_text}:\n")
                _emit(value, indent + 2, out)
            elif isinstance(value, list) and value:
                out.append(f"{pad}{key_text}:\n")
                _emit(value, indent, out)
            elif isinstance(value, (dict, list)):
                out.append(f"{pad}{key_text}: {'{}' if isinstance(value, dict) else '[]'}\n")
            else:
                out.append(f"{pad}{key_text}: {quoted_scalar(value)}\n")
    else:
        for item in node:
            if isinstance(item, dict) and item:
                first = True
                for key, value in item.items():
                    lead = f"{pad}- " if first else f"{pad}  "
                    first = False
                    if isinstance(value, (dict, list)) and value:
                        out.append(f"{lead}{key}:\n")
                        _emit(value, indent + 4 if isinstance(value, dict) else indent + 2, out)
                    elif isinstance(value, (dict, list)):
                        out.append(f"{lead}{key}: {'{}' if isinstance(value, dict) else '[]'}\n")
                    else:
                        out.append(f"{lead}{key}: {quoted_scalar(value)}\n")
            else:
                out.append(f"{pad}- {quoted_scalar(item)}\n")
