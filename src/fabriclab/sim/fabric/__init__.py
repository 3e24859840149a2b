"""The fabric at run time and the agents that answer its MADs: ports, switches and their
tables (state), how a MAD crosses the fabric (router), the SMA and PMA, partitions, link
state changes and traps, where data goes (datapaths).  Pure state and rules: nothing here
opens a socket, a file or a process."""
