"""Hostile but realistic inputs (tests/hostile_cases.py), each run as a real
``python -m fabriclab.cli`` child: it must end with what the user is owed (one
``error:`` line, or ``warning:`` lines and exit 1), within 10 s and 500 MB of peak RSS
(measured with os.wait4; the child also runs under an address-space limit, so that a
regression fails the test instead of taking the machine down)."""

from __future__ import annotations

from pathlib import Path

import hostile_cases as hc
import pytest

TIME_S = 10.0
RSS_MB = 500.0
AS_LIMIT = 2 << 30  # address space, a safety net well above the RSS bound


@pytest.mark.parametrize("case", hc.CASES, ids=[c.name for c in hc.CASES])
def test_hostile_input(case: hc.Case, tmp_path: Path):
    case.write(tmp_path)
    o = hc.run(case, tmp_path, timeout=TIME_S * 3, as_limit=AS_LIMIT)
    wrong = hc.problems(case, o)
    assert not wrong, f"{case.name}: {wrong}\nstderr: {o.stderr[-2000:]}"
    assert o.wall <= TIME_S, f"{case.name} took {o.wall:.1f} s"
    assert o.rss_mb <= RSS_MB, f"{case.name} peaked at {o.rss_mb:.0f} MB"
    if case.validate_output:
        # import never writes what validate rejects
        v = hc.run(
            case, tmp_path, timeout=60, as_limit=AS_LIMIT, args=("validate", case.validate_output)
        )
        assert v.rc == 0, (
            f"validate {case.validate_output}: {v.stderr}\n"
            + (tmp_path / case.validate_output).read_text()[:3000]
        )
