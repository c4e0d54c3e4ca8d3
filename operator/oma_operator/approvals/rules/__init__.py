"""The pure rules of approvals: which resources are trusted, what they hold, who may
decide, and what a reviewer reads. No API calls.
"""
