"""The ``fabriclab`` command: the Typer app, its command groups, and ``main()``, where
every error a user can cause becomes ``error: <where>: <what>`` lines and an exit code."""

from __future__ import annotations

import os
import sys
from importlib.metadata import version

import typer

from ..errors import FabriclabError, shown
from . import api, collective, events, fabric, hostview, live, locate, networks, offline, topology
from .common import ReaderGone, err, prose, show, warn

app = typer.Typer(
    no_args_is_help=True,
    help=prose(
        """Emulated GPU-cluster networks: NVLink domains and an InfiniBand fabric, in the
        real tools' formats.

        Example: fabriclab render lab ibnetdiscover"""
    ),
)
for group in (offline, topology, fabric, hostview, live, events, locate, api, collective, networks):
    app.add_typer(group.commands)


def _version(given: bool) -> None:
    if given:
        show(f"fabriclab {version('fabriclab')}")
        raise typer.Exit()


@app.callback()
def _options(
    _: bool = typer.Option(
        False,
        "--version",
        callback=_version,
        is_eager=True,
        help="Print fabriclab's version and exit.",
    ),
) -> None:
    """The options before the command."""


def _is(e: Exception, name: str) -> bool:
    """Whether ``e`` is click's exception ``name``, from click or typer's copy of it."""
    return any(
        c.__name__ == name and c.__module__.split(".")[0] in ("click", "typer")
        for c in type(e).__mro__
    )


def _usage_where(e) -> str:
    param = getattr(e, "param", None)
    if param is None:
        return ""
    opts = list(getattr(param, "opts", None) or [])
    if getattr(param, "param_type_name", "") == "option" and opts:
        return f"{max(opts, key=len)}: "
    return f"{(param.name or '').upper()}: " if param.name else ""


def _usage_what(e) -> str:
    what = (
        getattr(e, "message", "") if getattr(e, "param", None) is not None else ""
    ) or e.format_message()
    what = " ".join(str(what).split())
    cmd = e.ctx.command_path if getattr(e, "ctx", None) is not None else "fabriclab"
    return f"{what} (see '{cmd} --help')"


def main() -> None:
    """Entry point: run the app, turning user errors into ``error:`` lines."""
    try:
        rv = app(standalone_mode=False)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
    except FabriclabError as e:
        warn(e.warnings, e.warnings_dropped)
        for line in shown(e.problems, "error", e.dropped):
            err.print(line, markup=False)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except (BrokenPipeError, ReaderGone):
        sys.exit(0)
    except Exception as e:
        # Usage errors come from click (vendored by newer typer): its own text is several
        # lines (usage, a hint, "Error: ..."); one line instead.
        if _is(e, "UsageError"):
            err.print(f"error: {_usage_where(e)}{_usage_what(e)}", markup=False)
            sys.exit(2)
        if _is(e, "ClickException"):
            fmt = getattr(e, "format_message", None)
            message = fmt() if callable(fmt) else str(e)
            err.print(f"error: {' '.join(str(message).split())}", markup=False)
            code = getattr(e, "exit_code", None)
            sys.exit(code if isinstance(code, int) else 2)
        if os.environ.get("FABRICLAB_DEBUG"):  # pragma: no cover - a bug, not a user error
            raise
        err.print(
            f"error: internal: {type(e).__name__}: {e} (set FABRICLAB_DEBUG=1 for a traceback)",
            markup=False,
        )
        sys.exit(70)
