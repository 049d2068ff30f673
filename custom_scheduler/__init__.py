"""custom-scheduler: a Kubernetes scheduler in Python with kube-scheduler's semantics."""

__version__ = "0.1.0"
