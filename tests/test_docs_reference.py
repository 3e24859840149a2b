"""The docs match the code: docs/commands.md has a section for every command of the
CLI naming each of its options, a synopsis of each naming every option it has and none it
has not, the command's own options at the top and every command in its table; and the
README's links reach pages that exist."""

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


def _synopsis(text: str) -> str:
    """A section's synopsis: its first ```text block."""
    m = re.search(r"```text\n(.*?)```", text, re.S)
    return m.group(1) if m else ""


def _names(cmd) -> list[list[str]]:
    """Each option of ``cmd`` (but --help) as the forms it is given by."""
    return [
        [*p.opts, *p.secondary_opts]
        for p in cmd.params
        if p.param_type_name == "option" and p.name != "help"
    ]


def test_every_synopsis_names_the_options_and_no_others() -> None:
    root = typer.main.get_command(_app())
    sections = _sections()
    wrong = []
    for path, cmd in _commands(root, ("fabriclab",)):
        title = " ".join(path)
        if len(path) == 1 or title not in sections:
            continue  # the section itself: test_every_command_and_option_is_in_the_reference
        synopsis = _synopsis(sections[title])
        if not synopsis.startswith(title):
            wrong.append(f"{title}: no synopsis starting '{title}'")
            continue
        for forms in _names(cmd):
            if not any(re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", synopsis) for f in forms):
                wrong.append(f"{title}: the synopsis lacks {'/'.join(forms)}")
        known = {f for forms in _names(cmd) for f in forms}
        # before a lone "--" (what follows is the tool's); "-vv" is "-v" given twice
        ours = re.split(r"(?<![\w-])--(?= |$)", synopsis)[0]
        given = [
            re.sub(r"^-(\w)\1+$", r"-\1", o)
            for o in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", ours)
        ]
        wrong += [
            f"{title}: the synopsis names {o}, not an option" for o in given if o not in known
        ]
    # the command's own options, and every command in the table at the top
    text = COMMANDS.read_text()
    top = _synopsis(text)
    if not top.startswith("fabriclab ["):
        wrong.append("no synopsis of fabriclab itself at the top")
    wrong += [
        f"fabriclab: the synopsis lacks {'/'.join(f)}" for f in _names(root) if f[0] not in top
    ]
    wrong += [
        f"the command table lacks {name}"
        for name in root.list_commands(None)
        if f"| [`{name}`](#fabriclab-{name}) |" not in text
    ]
    assert not wrong, "docs/commands.md:\n" + "\n".join(wrong)


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
