"""The fenced blocks of the docs (README.md and docs/*.md) and the commands in them.

A block is marked on its fence with an attribute list, which MkDocs renders (the
``attr_list`` extension) and a repository host shows as a plain code block:

- ```` ```{.sh .run} ````: commands to run, one a line (a line ending in ``\\`` goes on
  on the next); blank lines and ``#`` comment lines are not run;
- ```` ```{.console .run} ````: a transcript: the lines that start with ``$ `` are the
  commands, the others what they print (not compared);
- ```` ```{.yaml data-file="NAME"} ````: a file the page's runnable blocks read: it is
  written as NAME into the working directory of each of them before it runs; a NAME
  under ``examples/`` is the repository's file shown (each block's working directory
  has the repository's ``examples/``), checked to be the same, not written.

A command is expected to exit 0, or the status its trailing comment states first
(``fabriclab check lab --ibnetdiscover lab.topo   # exit 1: ...``); it runs in bash with
``set -o pipefail``, so a pipeline fails when any command in it does.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_ATTR = re.compile(r'\.(?P<cls>[\w-]+)|(?P<key>[\w-]+)=(?:"(?P<q>[^"]*)"|(?P<v>\S+))')
_EXIT = re.compile(r"\s#\s*exit\s+(\d+)\b")
# the classes and keys a fence's attribute list may carry: a misspelt one is an error,
# not a block silently left unrun
KNOWN_CLASSES = {"run", "sh", "console", "yaml", "text", "json"}
KNOWN_KEYS = {"data-file"}
# commands that reach a running fabric, or serve on a port: their block runs in a
# network namespace and state directory of its own
_ISOLATED = re.compile(
    r"^(?:\w+=\S*\s+)*fabriclab\s+(up|down|status|exec|fault|traffic|events|scenario|clock|sysfs|shims"
    r"|nvidia-smi|serve-topology)\b"
)


@dataclass
class Command:
    line: int  # 1-based line of the page where the command starts
    text: str
    status: int  # the exit status expected


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    info: str
    classes: list[str]
    attrs: dict[str, str]
    body: list[str]  # the lines between the fences, the fence's indent removed
    problems: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return "run" in self.classes

    def commands(self) -> list[Command]:
        transcript = "console" in self.classes
        cmds: list[Command] = []
        i = 0
        while i < len(self.body):
            raw, n = self.body[i], i
            i += 1
            if transcript:
                if not raw.startswith("$ "):
                    continue
                raw = raw[2:]
            elif not raw.strip() or raw.lstrip().startswith("#"):
                continue
            text = raw
            while text.endswith("\\") and i < len(self.body):
                text += "\n" + self.body[i]  # bash takes backslash-newline as it is
                i += 1
            m = _EXIT.search(text)
            cmds.append(Command(self.line + 1 + n, text, int(m.group(1)) if m else 0))
        return cmds

    def isolated(self) -> bool:
        """Whether the block reaches a running fabric (or serves a port)."""
        for c in self.commands():
            t = c.text.strip()
            if _ISOLATED.match(t):
                return True
            if t.startswith("fabriclab topology") and re.search(r"\s(--name|-n)[\s=]", t):
                return True
        return False

    def fabric_names(self) -> list[str]:
        """The names of the fabrics the block's ``fabriclab up`` lines bring up."""
        names = []
        for c in self.commands():
            t = c.text.strip()
            if not t.startswith("fabriclab up"):
                continue
            argv = shlex.split(t.split("|")[0], comments=True)
            name = "sim"
            for k, a in enumerate(argv):
                if a in ("--name", "-n") and k + 1 < len(argv):
                    name = argv[k + 1]
                elif a.startswith("--name="):
                    name = a.split("=", 1)[1]
            names.append(name)
        return names

    def uses_real_tools(self) -> bool:
        """Whether the block runs OpenSM or infiniband-diags (``--sm``, ``exec``, ``shims``)."""
        return any(re.search(r"\s--sm\b|\bexec\b|\bshims\b", c.text) for c in self.commands())


def pages() -> list[Path]:
    """The pages whose examples are run: the README and every docs page."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a page, in order."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group("indent"), m.group("fence"), m.group("info").strip()
        start = i
        body = []
        i += 1
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        while i < len(lines) and not closing.match(lines[i]):
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1
        classes, attrs, problems = _attributes(info)
        if indent:  # Python-Markdown does not see a fence inside a list item
            problems.append("an indented fence (in a list?): MkDocs shows it as plain text")
        found.append(Block(path, start + 1, info, classes, attrs, body, problems))
    return found


def _attributes(info: str) -> tuple[list[str], dict[str, str], list[str]]:
    """The classes and key=value pairs of a fence's ``{...}`` attribute list, and what is
    wrong with it."""
    if not info.startswith("{"):
        return [], {}, []
    if not info.endswith("}"):
        return [], {}, [f"attribute list not closed: {info!r}"]
    classes, attrs, problems = [], {}, []
    inner = info[1:-1].strip()
    pos = 0
    for m in _ATTR.finditer(inner):
        if inner[pos : m.start()].strip():
            problems.append(f"not an attribute: {inner[pos : m.start()].strip()!r}")
        pos = m.end()
        if m.group("cls"):
            classes.append(m.group("cls"))
        else:
            attrs[m.group("key")] = m.group("q") if m.group("q") is not None else m.group("v")
    if inner[pos:].strip():
        problems.append(f"not an attribute: {inner[pos:].strip()!r}")
    problems += [f"unknown class .{c}" for c in classes if c not in KNOWN_CLASSES]
    problems += [f"unknown attribute {k}=" for k in attrs if k not in KNOWN_KEYS]
    return classes, attrs, problems
