"""The pure core: values in, values out; no I/O (held to it by the pure-core contract)."""
