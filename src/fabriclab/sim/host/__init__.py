"""A tray's own view of the running fabric: its HCAs as its host sees them (hostview), its
/sys/class/infiniband (sysfs), what its tools show (views), and the C host library that
puts them in front of a real tool (hostlib)."""
