"""The collector held off while a restore builds its document (``oma.gc_pause``): always back
on after, whatever happened inside, and left alone when the program turned it off."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from oma.checkpoint.journal import JournalWriter
from oma.checkpoint.manager import Checkpoint
from oma.errors import CheckpointDecodeError
from oma.gc_pause import gc_paused
from oma.store import InMemoryStore


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_off_inside_and_on_after() -> None:
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():  # nested: the outer one turns it back on
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_on_after_an_error_inside() -> None:
    with pytest.raises(ZeroDivisionError), gc_paused():
        _ = 1 / 0
    assert gc.isenabled()


def test_left_off_when_the_program_turned_it_off() -> None:
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


async def test_a_load_that_fails_inside_the_pause_leaves_the_collector_on() -> None:
    store = InMemoryStore()
    key = "__oma_checkpoint__/gc/latest"
    writer = JournalWriter(store, key, fenced=True)
    assert await writer.start({"version": 4, "createdAt": "2026-12-08T00:00:00.000Z"}, {}, "x")
    entry = await store.journal_get(key)
    assert entry is not None
    damaged = [*entry.records[:-1], entry.records[-1] + "]"]  # no longer JSON
    assert await store.journal_write(
        key, damaged, version="v2", expected=entry.version, replace=True
    )
    with pytest.raises(CheckpointDecodeError):
        await Checkpoint(store, key=key).load_latest()
    assert gc.isenabled()
