"""The node agent's shell: reading the node's files and publishing its record."""
