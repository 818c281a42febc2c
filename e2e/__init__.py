"""End-to-end helpers: a real etcd, kube-apiserver and kube-scheduler on 127.0.0.1 (see ``e2e.controlplane``)."""
