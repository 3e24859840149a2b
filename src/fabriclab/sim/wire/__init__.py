"""The ways in: the sockets tools attach through (the ibsim protocol's datagrams, the
host library's connections), who may attach, and the path every MAD takes from a client
to the fabric's agents and back.  The server (:mod:`.server`) assembles them."""
