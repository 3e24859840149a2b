"""Property-based fuzzing of every parser of user input: the spec loader (arbitrary YAML
text and arbitrary structures), hostlists, and the ibnetdiscover parser (arbitrary and
mutated dumps).  Each may only answer with its own error type or a result; and what
``import`` makes of any dump that parses is a spec that ``validate`` accepts."""

from __future__ import annotations

import os

import hostile_cases as hc
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from fabriclab.errors import InputError, SpecError
from fabriclab.formats import ibnetdiscover
from fabriclab.model.build import build
from fabriclab.model.to_spec import spec_from_fabric
from fabriclab.spec import hostlist
from fabriclab.spec.load import parse_spec_text
from fabriclab.spec.schema import Spec

# FABRICLAB_FUZZ_EXAMPLES=5000 fuzzes longer
EXAMPLES = int(os.environ.get("FABRICLAB_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- spec loader ------------------------------------------------------------------------

YAML_BITS = [
    "name: x\n",
    "trays:\n",
    "  - hosts: n[1-4]\n",
    "    hcas: 2\n",
    "fabric:\n",
    "  fat_tree: {}\n",
    "  explicit:\n",
    "    switches: [{name: s1, lid: 5}]\n",
    "    links: ['s1[1] -- s2[1]']\n",
    "&a ",
    "*a",
    "<<: *a\n",
    "? ",
    ": ",
    "- ",
    "[",
    "]",
    "{",
    "}",
    "!!python/object:os.system",
    "!!binary",
    "!!int ",
    "0x",
    "9" * 50,
    "---\n",
    "'",
    '"',
    "\t",
    "#",
    "~",
    "\n",
    "  ",
    "lids: {switch_base: 1}\n",
    "\x00",
    "\ufeff",
]


def _spec_outcome(text: str) -> None:
    try:
        spec = parse_spec_text(text, "f.yaml")
    except SpecError as e:
        assert e.problems and all("\n" not in str(p) for p in e.problems)
        return
    assert isinstance(spec, Spec)
    try:
        build(spec)
    except SpecError:
        pass


@FUZZ
@given(st.text(max_size=400))
def test_spec_loader_arbitrary_text(text):
    _spec_outcome(text)


@FUZZ
@given(st.lists(st.sampled_from(YAML_BITS) | st.text(max_size=8), max_size=40).map("".join))
def test_spec_loader_yaml_like_text(text):
    _spec_outcome(text)


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.sampled_from(
        [
            "n[1-4]",
            "n[1-100000]",
            "quantum-2",
            "NDR",
            "0xffffffffffffffffff",
            "{n:99999d}",
            "s1[1] -- s2[1]",
        ]
    )
)
KEYS = st.sampled_from(
    [
        "name",
        "trays",
        "hosts",
        "hcas",
        "gpus",
        "fabric",
        "fat_tree",
        "explicit",
        "switches",
        "cas",
        "links",
        "lid",
        "lids",
        "lmc",
        "guid",
        "port_guids",
        "ports",
        "desc",
        "names",
        "leaf",
        "nvlink",
        "domains",
        "partitions",
        "tiers",
        "spines",
        "guids",
        "scheme",
        "switch_base",
        "ca_base",
        "trays_per_domain",
        "colour",
    ]
)
structures = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(KEYS, inner, max_size=6),
    max_leaves=30,
)


@FUZZ
@given(st.dictionaries(KEYS, structures, max_size=6))
def test_spec_loader_arbitrary_structures(data):
    try:
        text = yaml.safe_dump(data)
    except (yaml.YAMLError, ValueError, OverflowError):
        assume(False)
    _spec_outcome(text)


def test_spec_loader_matches_pyyaml_on_ordinary_documents():
    for text in [hc.TINY_SPEC, "a: &x {b: 1}\nc: {<<: *x, d: [1, 0x10, 010, yes, ~, 1.5, '7']}\n"]:
        from fabriclab.spec import yaml_guard

        assert yaml_guard.load(text, "t") == yaml.safe_load(text)


# --- hostlists --------------------------------------------------------------------------

ranges = st.tuples(st.integers(0, 30), st.integers(0, 5), st.booleans()).map(
    lambda t: (f"{t[0]:03d}" if t[2] else str(t[0])) + (f"-{t[0] + t[1]}" if t[1] else "")
)
terms = st.lists(
    st.sampled_from(["n", "gb-r", "-t", "x.y", "a_b"])
    | ranges.map(lambda r: f"[{r}]")
    | st.integers(0, 99).map(str),
    min_size=1,
    max_size=4,
).map("".join)
hostlists = st.lists(terms, min_size=1, max_size=4).map(",".join)


@FUZZ
@given(hostlists)
def test_hostlist_count_agrees_with_expand(text):
    try:
        n = hostlist.count(text)
    except hostlist.HostlistError:
        try:
            hostlist.expand(text)
        except hostlist.HostlistError:
            return
        raise AssertionError(f"count refused {text!r}, expand did not") from None
    try:
        names = hostlist.expand(text)
    except hostlist.HostlistError as e:
        assert "twice" in str(e)  # only expansion sees duplicates
        return
    assert len(names) == n


@FUZZ
@given(
    st.text(max_size=60)
    | st.lists(st.sampled_from(list("n[]-,0123456789 ab")), max_size=30).map("".join)
)
@example("n[1-1000000000000]")
@example("n[" + "9" * 5000 + "]")
@example("n[1-99999][1-99999]")
def test_hostlist_arbitrary_text(text):
    try:
        hosts = hostlist.expand(text)
    except hostlist.HostlistError:
        return
    assert len(hosts) == hostlist.count(text) == len(set(hosts))


@FUZZ
@given(
    st.lists(
        st.text(alphabet="abcdefgh0123456789-", min_size=1, max_size=10),
        min_size=1,
        max_size=20,
        unique=True,
    )
)
def test_hostlist_names_round_trip(names):
    assume(all(not n.startswith("-") or True for n in names))
    assert hostlist.expand(",".join(names)) == names


@FUZZ
@given(st.integers(1, 5000), st.sampled_from(["gb-r[01-08]-t[01-18]", "n[1-2]", "a[7]-b[1-3]"]))
def test_hostlist_scale_round_trip(count, text):
    assert len(hostlist.expand(hostlist.scale(text, count))) == count


# --- ibnetdiscover parser -----------------------------------------------------------------

DUMPS = [hc.TINY_DUMP, hc.PORTS_LINE, hc.TINY_DUMP.replace("\t", "  ")]


def _import_validates(dump: ibnetdiscover.Dump) -> None:
    """What import writes of a parsed dump is a spec validate accepts."""
    try:
        data = spec_from_fabric(dump.fabric, "fuzz", warnings=[])
    except InputError:
        return
    text = yaml.safe_dump(data, sort_keys=False, width=120)
    try:
        build(parse_spec_text(text, "imported.yaml"))
    except SpecError as e:
        raise AssertionError(f"validate rejects what import wrote: {e}\n{text}") from None


def _parse_outcome(text: str) -> None:
    try:
        dump = ibnetdiscover.parse(text, "d")
    except InputError as e:
        assert e.problems
        return
    assert isinstance(dump, ibnetdiscover.Dump)
    _import_validates(dump)


@FUZZ
@given(st.text(max_size=500))
def test_dump_parser_arbitrary_text(text):
    _parse_outcome(text)


@st.composite
def mutated_dumps(draw):
    text = draw(st.sampled_from(DUMPS))
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "dup", "swap", "digit", "cut", "insert", "replace"]))
        line = lines[i]
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, line)
        elif op == "swap" and len(lines) > 1:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "digit" and any(c.isdigit() for c in line):
            pos = draw(st.sampled_from([k for k, c in enumerate(line) if c.isdigit()]))
            new = draw(st.sampled_from(["0", "9", "99999", "255", "49152", "f" * 17, ""]))
            lines[i] = line[:pos] + new + line[pos + 1 :]
        elif op == "cut" and line:
            lines[i] = line[: draw(st.integers(0, len(line)))]
        elif op == "insert":
            lines.insert(i, draw(st.text(max_size=40)))
        elif op == "replace" and line:
            pos = draw(st.integers(0, len(line) - 1))
            lines[i] = (
                line[:pos]
                + draw(st.sampled_from(['"', "'", "[", "]", "(", ")", "#", " ", "\t", "x"]))
                + line[pos + 1 :]
            )
        if not lines:
            lines = [""]
    text = "\n".join(lines)
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    return text


@settings(max_examples=2 * EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_dumps())
def test_dump_parser_mutated_dumps(text):
    _parse_outcome(text)


def test_round_trip_still_exact():
    """render -> parse -> render is unchanged on a dump that was exact before."""
    d = ibnetdiscover.parse(hc.TINY_DUMP, "d")
    assert d.warnings == []
    assert ibnetdiscover.render(d.fabric, d.from_port, now=1733000000) == hc.TINY_DUMP


def test_import_of_every_test_dump_validates(fixtures_dir):
    """Every dump the tests hold (tests/fixtures and the hostile table) imports to a spec
    that validate accepts."""
    texts = [
        p.read_text(errors="replace")
        for group in ("real", "topograph")
        for p in sorted((fixtures_dir / group).iterdir())
        if "ibnetdiscover" in p.name.lower() or p.suffix == ".topo"
    ]
    for case in hc.CASES:
        for name, content in case.files.items():
            if name == "dump.txt":
                data = content() if callable(content) else content
                if len(data) < 1 << 20:
                    texts.append(data.decode(errors="replace"))
    assert len(texts) > 20
    for text in texts:
        _parse_outcome(text)
