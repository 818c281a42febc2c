"""Tests against a real etcd + kube-apiserver + kube-scheduler (marker ``cluster``)."""
