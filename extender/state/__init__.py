"""The state: the cluster's accounts and the decisions over them; no I/O framework."""
