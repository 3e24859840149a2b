"""The other networks built in Linux: a network namespace for every endpoint and
switch, veth pairs for the cables, a bridge in each switch."""
