"""A TeamRun's attempts: starting, queueing, holding, ending, retrying and deleting runs,
with their pure rules in ``rules``.
"""
