from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import toolsets  # noqa: E402  (a module of this directory, importable once it is on the path)

# Real tools' outputs and topograph's test data, kept in the repository (fixtures/MANIFEST.tsv
# names each file's source and licence), so the suite runs from a clone alone.
FIXTURES = HERE / "fixtures"
SPECS = HERE / "specs"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"fixtures not found at {FIXTURES}")
    return FIXTURES


@pytest.fixture(scope="session")
def real_tools():
    """The real OFA tools must be installed (scripts/install-system-deps.sh does it);
    a missing tool is a failure, not a skip."""
    from realtools import missing_tools

    missing = missing_tools()
    if missing:
        pytest.fail(f"missing real tools {missing}: run scripts/install-system-deps.sh")
    return True


@pytest.fixture(params=toolsets.names())
def toolset(request):
    """Each set of real OFA tools this machine has (tests/toolsets.py): the system's, and
    on a machine older than Debian 13 the Debian 13 root's (built on first use)."""
    return toolsets.get(request.param)
