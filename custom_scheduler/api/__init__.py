"""Projections of what the API server sends: pods and nodes, storage objects, DRA and PodGroup
models, label selectors and quantities. Pure values; no I/O, nothing from the other layers."""
