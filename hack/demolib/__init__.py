"""``hack/demo``: oma end to end on the local control plane (see docs/demo.md)."""
