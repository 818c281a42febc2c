"""The live-cluster shell: list/watch, bind, events. Thin layers over the official client."""
