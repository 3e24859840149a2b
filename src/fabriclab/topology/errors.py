"""The topology layer's user-facing error: a topology that cannot be produced for what
was asked, as one line, with the HTTP status the topology API answers it with."""

from __future__ import annotations

from ..errors import FabriclabError


class TopologyProblem(FabriclabError):
    """Base of every error the topology engines and providers raise (TopologyError,
    LabelError, ProviderError, ModelError): the CLI and the HTTP API catch this one
    class, not a hand-kept list.  ``status`` is the HTTP status of the API's answer."""

    status = 400

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class RequestError(TopologyProblem):
    """A request the topology API refuses before any work: a body too large (413), JSON
    too deep or with too long a number (422), or a malformed request (400)."""
