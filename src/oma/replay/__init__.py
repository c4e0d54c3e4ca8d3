"""Replaying a recorded run as a test: the current code against a run's kept history, offline.

``replay_run`` runs a run spec again with every model answered from the turns the recorded run's
history holds and every tool from its commits (no provider, no tool, no MCP server is called),
into a store in memory, then compares each boundary it saves with the recorded one and names
the first boundary and JSON path where they differ (``ReplayReport``).
"""

from oma.replay.compare import Divergence, first_difference
from oma.replay.recording import Recording
from oma.replay.run import ReplayError, ReplayReport, replay_run

__all__ = [
    "Divergence",
    "Recording",
    "ReplayError",
    "ReplayReport",
    "first_difference",
    "replay_run",
]
