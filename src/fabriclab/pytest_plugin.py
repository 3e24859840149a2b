"""fabriclab's pytest plugin: a running fabric for a test, brought up before it and taken
down after it, pass or fail.

Installed with fabriclab (the ``pytest11`` entry point ``fabriclab``; ``-p no:fabriclab``
leaves it out).  It adds, and activates nothing by itself:

- the ``fabric`` fixture: a :class:`fabriclab.client.Fabric` brought up as the test's
  ``@pytest.mark.fabric(SPEC, **options)`` says (the options of
  :meth:`~fabriclab.client.Fabric.up`: ``sm``, ``virtual_clock``, ``trays``, ...;
  without the mark, ``lab`` with its defaults);
- the ``fabric_factory`` fixture: ``fabric_factory(SPEC, **options)`` brings up another
  fabric, as many as the test wants.

Each test's fabrics live in a state directory of the test's own, named after the test
and unique on the machine; ``FABRICLAB_STATE_DIR`` names that directory while the test
runs (so a ``fabriclab`` command the test runs finds them), and every fabric is taken
down, and the directory removed, when the test ends.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .client import Fabric

MARK = "fabric"
DEFAULT_SPEC = "lab"
_NAME_KEEP = 40  # characters of the test's name kept in a fabric's name


def pytest_configure(config: pytest.Config) -> None:
    """Declare the mark (so ``--strict-markers`` takes it)."""
    config.addinivalue_line(
        "markers",
        f"{MARK}(spec='{DEFAULT_SPEC}', **options): the fabric the 'fabric' fixture brings "
        "up for the test (options: those of fabriclab.client.Fabric.up)",
    )


def _fabric_name(test: str) -> str:
    """A fabric name for test ``test``, unique on this machine (its sockets are named
    after it in the abstract namespace)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", test).strip("-")[:_NAME_KEEP] or "test"
    return f"{stem}-{secrets.token_hex(4)}"


@pytest.fixture
def fabric_factory(request: pytest.FixtureRequest) -> Iterator[Callable[..., Fabric]]:
    """``fabric_factory(spec="lab", **options)``: a fabric brought up for this test (the
    options of :meth:`fabriclab.client.Fabric.up`), taken down when the test ends."""
    from .client import Fabric
    from .errors import FabriclabError

    state = tempfile.mkdtemp(prefix="fabriclab-")  # short: socket paths are short
    names: list[str] = []

    def bring_up(spec: str | os.PathLike[str] = DEFAULT_SPEC, **options: Any) -> Fabric:
        name = options.pop("name", None) or _fabric_name(request.node.name)
        names.append(name)  # taken down at the end even if it comes up only half
        return Fabric.up(spec, name=name, **options)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FABRICLAB_STATE_DIR", state)
        try:
            yield bring_up
        finally:
            failed: list[FabriclabError] = []
            for name in reversed(names):
                try:
                    Fabric(name).down(missing_ok=True)
                except FabriclabError as e:
                    failed.append(e)
            if failed:  # the state directory stays: the fabric's record and log are there
                raise failed[0]
            shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def fabric(request: pytest.FixtureRequest, fabric_factory: Callable[..., Fabric]) -> Fabric:
    """A running fabric, brought up as the test's ``@pytest.mark.fabric(SPEC,
    **options)`` says (``lab`` without it), and taken down after the test."""
    mark = request.node.get_closest_marker(MARK)
    args, kwargs = (mark.args, dict(mark.kwargs)) if mark is not None else ((), {})
    if len(args) > 1:
        pytest.fail(f"@pytest.mark.{MARK}: one spec, then options by name", pytrace=False)
    return fabric_factory(*args, **kwargs)
