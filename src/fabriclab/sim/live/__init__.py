"""The live fabric: faults, bit errors, scenarios, traffic flows, time and the event log
of a running fabric, and the journal that brings them back after a restart.  The API is
:class:`.api.LiveFabric`."""
