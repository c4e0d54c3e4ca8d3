"""Shared memory: namespaced keys, reserved prefixes invisible, turns and expiry; the bus."""

from __future__ import annotations

from oma.memory import MessageBus, SharedMemory
from oma.store import InMemoryStore


async def test_entries_are_namespaced_and_reserved_keys_invisible() -> None:
    store = InMemoryStore()
    await store.set("__oma_checkpoint__/r/latest", "{}")
    await store.set("__oma_approval__/apr_x", "{}")
    memory = SharedMemory(store)
    await memory.write("alice", "note", "hello", {"source": "web"})
    assert [e.key for e in await memory.list()] == ["alice/note"]
    entry = await memory.read("alice/note")
    assert entry is not None and entry.metadata == {"source": "web", "agent": "alice"}
    assert await memory.read("__oma_checkpoint__/r/latest") is None
    snapshot = await memory.snapshot()
    assert [e.key for e in snapshot.entries] == ["alice/note"]


async def test_expiry_by_turns() -> None:
    memory = SharedMemory(InMemoryStore())
    await memory.write("a", "short", "x", ttl_turns=1)
    assert await memory.read("a/short") is not None
    memory.advance_turn()
    assert await memory.read("a/short") is None
    assert await memory.list() == []


async def test_restore_replaces_entries_but_keeps_reserved_keys() -> None:
    store = InMemoryStore()
    memory = SharedMemory(store)
    await memory.write("a", "k", "v1")
    memory.advance_turn()
    snapshot = await memory.snapshot()
    await store.set("__oma_checkpoint__/latest", "keep me")
    await memory.write("b", "stray", "gone after restore")
    restored = SharedMemory(store)
    await restored.restore(snapshot)
    assert [e.key for e in await store.list()] == ["__oma_checkpoint__/latest", "a/k"]
    assert restored.turn_count == 1


def test_message_bus_delivers_unread_and_round_trips() -> None:
    bus = MessageBus()
    bus.send("alice", "bob", "hi bob")
    bus.send("carol", "*", "hi all")
    bus.send("bob", "*", "own broadcast")
    unread = bus.unread_for("bob")
    assert [m.content for m in unread] == ["hi bob", "hi all"]
    bus.mark_read("bob", [unread[0].id])
    copy = MessageBus()
    copy.restore(bus.snapshot())
    assert [m.content for m in copy.unread_for("bob")] == ["hi all"]
