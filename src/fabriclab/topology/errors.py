"""The topology layer's user-facing errors: one family under TopologyProblem, each a
one-line ``<where>: <what>`` with the HTTP status the topology API answers it with."""

from __future__ import annotations

from ..errors import FabriclabError, Problem


class TopologyProblem(FabriclabError):
    """Base of every error a user can cause in the topology layer (options, inputs,
    providers, engines, API requests): the ``topology`` command and the HTTP API catch
    this one class, not a hand-kept list.  ``status`` is the HTTP status of the API's
    answer; ``where`` (optional) is what the CLI prints before the message."""

    status = 400

    def __init__(
        self,
        message: str,
        status: int | None = None,
        *,
        where: str = "",
        warnings: list[Problem] | None = None,
    ):
        super().__init__(message, where, warnings)
        if status is not None:
            self.status = status


class OptionError(TopologyProblem):
    """An option of ``fabriclab topology`` or a parameter of an API request that cannot
    be used: block sizes, a block name, a --topologies file, --nodes, an engine's missing
    option."""


class InputsError(TopologyProblem):
    """Inputs that cannot give a topology (a spec whose fabric has no CA)."""


class RequestError(TopologyProblem):
    """A request the topology API refuses before any work: a body too large (413), JSON
    too deep or with too long a number (422), or a malformed request (400)."""
