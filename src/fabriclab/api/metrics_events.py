"""The fabric's events counted by severity for ``/metrics``: the counts the Source keeps
as it reads the event log (each scrape reads only the lines written since the last
look, never the whole log again; :class:`fabriclab.eventlog.Tail`)."""

from __future__ import annotations

from .source import Source


class EventCounter:
    """How many events of each severity the fabric's log has held (counted from zero
    again when the fabric begins a new log: a counter reset, to Prometheus)."""

    def __init__(self, source: Source):
        self.source = source
        self.since = 0  # the id of the last event counted

    def counts(self, severities: tuple[str, ...]) -> dict[str, int]:
        """Every severity of ``severities`` (and any other seen) and its count now."""
        self.since, counted = self.source.event_counts()
        out = dict.fromkeys(severities, 0)
        out.update(counted)
        return out
