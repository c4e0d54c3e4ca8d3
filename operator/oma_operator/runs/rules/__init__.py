"""The pure rules of runs: how an attempt ended, what comes next, the status that says
so, the runner pod's manifest, concurrency limits, holds, progress. No API calls.
"""
