"""The ``oma`` commands of the operator's extra: approve, reject and resolve; retry;
suspend, resume and cancel.
"""
