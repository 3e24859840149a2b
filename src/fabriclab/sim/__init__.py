"""The fabric server: the fabric at run time answering MADs over the ibsim wire protocol, and its launcher."""
