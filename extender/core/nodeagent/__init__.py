"""The node agent's pure parts: its counters read from text, and the record it publishes."""
