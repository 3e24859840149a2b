"""Reading an event log as it grows (eventlog.Tail, what the API's event routes and
metrics read): only the new events each time, through rotations, and from the first
again when the fabric begins a new log under the same name."""

from __future__ import annotations

from fabriclab import eventlog
from fabriclab.sim.live import events as ev
from fabriclab.sim.live.clock import VirtualClock


def write(log: ev.EventLog, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        log.emit(ev.MAD_DROP, f"port-{i}", f"MAD drop rate set on port {i}")


def ids(events: list[dict]) -> list[int]:
    return [e["id"] for e in events]


def test_only_the_new_events_each_time_through_rotations(tmp_path):
    path = ev.events_path(tmp_path, "f")
    log = ev.EventLog(path, VirtualClock(), max_bytes=4000)  # about 10 events a file
    tail = eventlog.Tail(path)
    assert tail.new() == []
    write(log, 5)
    assert ids(tail.new()) == [1, 2, 3, 4, 5]
    assert tail.new() == []
    write(log, 25, 5)  # rotated twice meanwhile
    assert len(eventlog.log_files(path)) >= 3
    assert ids(tail.new()) == list(range(6, 31))
    write(log, 1, 30)
    assert ids(tail.new()) == [31]
    log.close()


def test_a_new_log_under_the_same_name_is_read_from_its_first(tmp_path):
    path = ev.events_path(tmp_path, "f")
    log = ev.EventLog(path, VirtualClock())
    tail = eventlog.Tail(path)
    write(log, 3)
    assert ids(tail.new()) == [1, 2, 3]
    log.close()
    eventlog.remove(path)  # the fabric brought up afresh
    log = ev.EventLog(path, VirtualClock())
    write(log, 2, 3)
    assert ids(tail.new()) == [1, 2] and tail.restarts == 1
    log.close()
