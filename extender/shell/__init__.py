"""The shell: HTTP, the Kubernetes API, files, processes; thin layers over the core and state."""
