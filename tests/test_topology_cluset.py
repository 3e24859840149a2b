"""topograph's node-list compaction and expansion (topology/cluset.py), in-process."""

from __future__ import annotations

import re

import pytest

from fabriclab.topology.cluset import MAX_EXPANDED, compact, expand_list
from fabriclab.topology.errors import OptionError


def test_compact_keeps_each_numbers_digits():
    assert compact(["n-1101", "n-1102", "n-1201"]) == ["n-[1101-1102,1201]"]
    assert compact(["n09", "n10", "n8", "x"]) == ["n[8-10]", "x"]
    assert compact(["n01", "n02", "n5"]) == ["n[01-02,5]"]


def test_expand_list_as_topograph():
    assert expand_list("n[01-03,7],m1") == ["n01", "n02", "n03", "n7", "m1"]
    assert expand_list(" a , ,b ") == ["a", "b"]  # entries trimmed, blank ones skipped
    assert expand_list("n[x-2]") == ["n0", "n1", "n2"]  # Go's Atoi: a bad number is 0


def test_expand_list_is_bounded_before_expanding():
    with pytest.raises(OptionError, match=f"exceeds {MAX_EXPANDED} entries"):
        expand_list("n[1-1000000000000]")


@pytest.mark.parametrize(
    "text,problem",
    [("n[1-2", "unclosed '['"), ("n[[1-2]]", "nested '['"), ("n1],n2", "unbalanced ']'")],
)
def test_malformed_brackets_are_an_option_error(text, problem):
    # spec.hostlist's term splitting: topograph would take these as literal names
    with pytest.raises(OptionError, match=re.escape(problem)):
        expand_list(text)
