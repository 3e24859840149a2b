"""docs/protocol.md against the server: every operation the admin socket answers is
documented, every documented one is answered, each one's fields (and the fault
options) are the request model's, the bounds are the server's, and each documented
request, sent in order to a running fabric, gets an answer of the documented shape (the
same keys, values of the same kinds)."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from docs_blocks import ROOT, blocks

from fabriclab.client import Fabric
from fabriclab.sim.live import admin_model, admin_requests
from fabriclab.sim.live.faults.options import OPTIONS
from fabriclab.sim.run import admin
from fabriclab.statedir import state_dir

DOC = ROOT / "docs" / "protocol.md"
Exchange = tuple[str, dict, dict]  # where in the doc, the request, the answer


def _answer(text: str, where: str) -> dict:
    """A documented answer: JSON, where a bare ``…`` list element stands for more of the
    same (left out)."""
    try:
        return json.loads(re.sub(r",\s*…", "", text))
    except ValueError as e:
        raise AssertionError(f"{where}: the answer is not JSON: {e}") from None


def exchanges() -> list[Exchange]:
    """The page's requests (``> `` lines) and their answers (a ``< `` line and the lines
    folded under it), in order."""
    out: list[Exchange] = []
    for b in blocks(DOC):
        if b.info != "text":
            continue
        items: list[tuple[str, str, list[str]]] = []  # (> or <, where, its lines)
        for i, line in enumerate(b.body):
            if line.startswith(("> ", "< ")):
                items.append((line[0], f"{DOC.relative_to(ROOT)}:{b.line + 1 + i}", [line[2:]]))
            elif items:
                items[-1][2].append(line)
        for k in range(0, len(items), 2):
            req, ans = items[k], items[k + 1] if k + 1 < len(items) else None
            assert req[0] == ">" and ans is not None and ans[0] == "<", (
                f"{req[1]}: want a request, then its answer"
            )
            out.append((req[1], json.loads(" ".join(req[2])), _answer("\n".join(ans[2]), ans[1])))
    return out


def answered_ops() -> set[str]:
    """The operations admin_requests.answer answers."""
    return set(admin_requests.OPS)


def sections() -> dict[str, str]:
    """Each operation's section of the page: ``### `OP` `` to the next heading."""
    parts = re.split(r"^### `([\w-]+)`$", DOC.read_text(), flags=re.M)
    return {
        op: body.split("\n## ", 1)[0] for op, body in zip(parts[1::2], parts[2::2], strict=True)
    }


# `NAME` (KIND[, optional][: what it is | ; ...]): a field as the page gives it
_FIELD = re.compile(r"`([\w-]+)` \(([a-z]+(?: (?:or|of) [a-z]+)*)(, optional)?[:;)]")


def documented_fields(text: str) -> dict[str, tuple[str, bool]]:
    """The fields a section's first paragraph gives: each one's kind and whether it is
    required."""
    first = " ".join(text.strip().split("\n\n", 1)[0].split()).split("Result:")[0]
    return {m[1]: (m[2], not m[3]) for m in _FIELD.finditer(first)}


def test_every_op_answered_is_documented_and_every_documented_op_is_answered() -> None:
    code = answered_ops()
    assert len(code) >= 12, code
    headings = set(re.findall(r"^### `([\w-]+)`$", DOC.read_text(), re.M))
    examples = {req["op"] for _, req, ans in exchanges() if ans["ok"]}
    assert headings == code, f"sections: {sorted(headings ^ code)} documented or answered only"
    assert examples == code, f"examples: {sorted(examples ^ code)} documented or answered only"


def test_each_operations_fields_are_the_models() -> None:
    problems = []
    for op, text in sections().items():
        got, want = documented_fields(text), admin_model.fields(op)
        if got != want:
            problems.append(f"{op}: documented {got}, the model takes {want}")
        if not want and not text.strip().startswith("No fields."):
            problems.append(f"{op}: takes no fields; the page should say so")
    assert not problems, "\n".join(problems)


def test_each_fault_kinds_options_are_the_ones_it_takes() -> None:
    text = sections()["fault"]
    rows = re.findall(r"^\| `([\w-]+)` \|[^|]*\|([^|]*)\|$", text, re.M)
    assert {k for k, _ in rows} == set(OPTIONS), rows
    model = admin_model.FaultOptions.model_json_schema()["properties"]
    for kind, cell in rows:
        given = {m[1]: m[2] for m in _FIELD.finditer(cell)}
        assert set(given) == set(OPTIONS[kind]), f"{kind}: {sorted(given)} documented"
        for name, kind_text in given.items():
            prop = {"anyOf": [p for p in model[name]["anyOf"] if p.get("type") != "null"]}
            assert kind_text == admin_model.kinds_of(prop), f"{kind}: {name} ({kind_text})"


def test_the_documented_bounds_are_the_servers() -> None:
    text = " ".join(DOC.read_text().split())
    assert f"a request line of at most {admin.LINE_MAX} bytes" in text
    assert f"nested deeper than {admin.DEPTH_MAX} levels" in text
    assert f"a number of more than {admin.DIGITS_MAX} digits" in text
    assert f"more than {admin.OUT_MAX} bytes of answers unread" in text
    assert f"takes none of them for {admin.STALL_MAX:g} seconds" in text
    assert f"At most {admin.CLIENTS_MAX} connections at once" in text
    assert f"when a {admin.CLIENTS_MAX + 1}th comes, the oldest is closed" in text


def _shape(doc: Any, got: Any, at: str) -> list[str]:
    """Where ``got`` differs from the documented ``doc`` in shape: a mapping's keys, a
    value's kind (null goes with anything; a list's first item stands for all)."""
    if doc is None or got is None:
        return []
    if isinstance(doc, dict):
        if not isinstance(got, dict):
            return [f"{at}: an object documented, {type(got).__name__} answered"]
        if set(doc) != set(got):
            return [f"{at}: keys {sorted(doc)} documented, {sorted(got)} answered"]
        return [d for k in doc for d in _shape(doc[k], got[k], f"{at}.{k}")]
    if isinstance(doc, list):
        if not isinstance(got, list):
            return [f"{at}: a list documented, {type(got).__name__} answered"]
        if doc and not got:
            return [f"{at}: items documented, none answered"]
        return _shape(doc[0], got[0], f"{at}[0]") if doc else []
    if _kind(doc) != _kind(got):
        return [f"{at}: {doc!r} documented, {got!r} answered"]
    return []


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    return "number" if isinstance(value, int | float) else type(value).__name__


class _Session:
    """One connection to a fabric's admin socket: a line out, a line back."""

    def __init__(self, path: Path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(str(path))
        self.lines = self.sock.makefile("rb")

    def ask(self, req: dict) -> dict:
        self.sock.sendall((json.dumps(req) + "\n").encode())
        line = self.lines.readline()
        assert line.endswith(b"\n"), f"no answer to {req}"
        return json.loads(line)

    def close(self) -> None:
        self.lines.close()
        self.sock.close()


@pytest.mark.fabric("lab", sm=False, virtual_clock=True, networks=True)
def test_each_documented_request_gets_the_documented_answer(fabric: Fabric) -> None:
    session = _Session(admin.admin_path(state_dir(), fabric.name))
    problems: list[str] = []
    try:
        for where, req, doc in exchanges():
            got = session.ask(req)
            if not doc["ok"]:  # an error is answered word for word
                if got != doc:
                    problems.append(f"{where}: {doc} documented, {got} answered")
                continue
            if not got.get("ok"):
                problems.append(f"{where}: answered with an error: {got}")
                continue
            problems += [f"{where}: {d}" for d in _shape(doc, got, "answer")]
    finally:
        session.close()
    assert not problems, "\n".join(problems)
