"""hugepage-extender: a kube-scheduler extender that admits and ranks nodes by hugepage room."""

__version__ = "0.2.0"
