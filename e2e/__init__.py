"""The end-to-end tests and their harness: ``e2e.cluster`` (suites on a real etcd, kube-apiserver and
kube-scheduler on 127.0.0.1, run by ``e2e.controlplane``), ``e2e.kind`` (real kubelets, real hugepages)."""
