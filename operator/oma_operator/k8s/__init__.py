"""Talking to the Kubernetes API: the client (the only user of the client library), the
kubeconfig it loads, and the watch's view of unfinished TeamRuns.
"""
