"""Installing and uninstalling: letting go of runner pods when the operator stops or
is uninstalled.
"""
