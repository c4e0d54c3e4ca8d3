"""Team memory: shared key/value memory and the message bus."""

from oma.memory.bus import MessageBus
from oma.memory.shared import SharedMemory

__all__ = ["MessageBus", "SharedMemory"]
