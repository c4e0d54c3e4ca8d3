"""Durable approvals on Kubernetes: publishing requests as ApprovalDecisions and
recording the decisions, with the pure rules in ``rules``.
"""
