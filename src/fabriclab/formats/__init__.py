"""One module per real tool: its output rendered from a fabric, or parsed into one."""
