"""The docs match the code: docs/commands.md has a section for every command of the
CLI naming each of its options, and the README's links reach pages that exist."""

from __future__ import annotations

import importlib
import re

import typer
from docs_blocks import ROOT

COMMANDS = ROOT / "docs" / "commands.md"


def _app() -> typer.Typer:
    """The Typer app of ``fabriclab.cli`` (the package's own module, or its ``app``)."""
    obj = importlib.import_module("fabriclab.cli").app
    return obj if isinstance(obj, typer.Typer) else obj.app


def _commands(cmd, path: tuple[str, ...]):
    yield path, cmd
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(None):
            yield from _commands(cmd.get_command(None, name), (*path, name))


def _sections() -> dict[str, str]:
    """commands.md's sections by heading (``### fabriclab fault down`` -> its text)."""
    sections: dict[str, str] = {}
    current = None
    for line in COMMANDS.read_text().splitlines():
        m = re.match(r"^#{2,3} (fabriclab(?: [\w-]+)*)\s*$", line)
        if m:
            current = m.group(1)
            sections[current] = ""
        elif line.startswith("## "):
            current = None
        elif current is not None:
            sections[current] += line + "\n"
    return sections


def test_every_command_and_option_is_in_the_reference() -> None:
    root = typer.main.get_command(_app())
    sections = _sections()
    missing = []
    for path, cmd in _commands(root, ("fabriclab",)):
        if len(path) == 1:
            continue
        title = " ".join(path)
        text = sections.get(title)
        if text is None:
            missing.append(f"no section '### {title}'")
            continue
        for param in cmd.params:
            if param.param_type_name != "option":
                continue
            for opt in (*param.opts, *param.secondary_opts):
                if opt.startswith("--") and not re.search(rf"{re.escape(opt)}(?![\w-])", text):
                    missing.append(f"{title}: {opt}")
    assert not missing, "docs/commands.md lacks:\n" + "\n".join(missing)


def test_the_readme_links_reach_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/") for link in local), "README.md links no docs page"
    broken = [link for link in local if not (ROOT / link).exists()]
    assert not broken, f"README.md links to missing files: {broken}"
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    linked = {link.removeprefix("docs/") for link in local if link.startswith("docs/")}
    assert pages <= linked, f"docs pages the README does not link: {sorted(pages - linked)}"
