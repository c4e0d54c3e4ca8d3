"""``verify_run`` and ``oma verify`` against the reference's own acceptance fixture for
``verifyRun()`` (its ``tests/verify-run.test.ts``, issue #527, rebuilt here from its definition)
and the reference's rules for reading a JSONL journal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from oma.cli.app import app
from oma.journal import JournalReadError, JournalShapeError, read_jsonl_journal, verify_run
from oma.journal.verify import content_hash

INPUT = {"type": "text", "text": "Investigate deploy failure"}
SUMMARY = {"type": "text", "text": "Summary: auth refresh timed out; retry budget exhausted."}


def event(seq: int, kind: str, **payload: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "timestampUnixMs": 1_700_000_000_000 + seq,
        "runId": "deploy-failure",
        "attempt": 1,
        "type": kind,
        "taskId": "task-1",
        "agentName": "investigator",
        **payload,
    }


def acceptance(summary_lineage: list[int] | None) -> list[dict[str, Any]]:
    """A request whose second block (a summary) no journaled event produced: the run's context
    was rewritten without a ``context/replace`` to say so."""
    block = {"messageIndex": 1, "blockIndex": 0, "role": "assistant", "blockType": "text"}
    return [
        event(1, "user/message", origin="input", message={"role": "user", "content": [INPUT]}),
        event(
            2,
            "assistant/message",
            origin="response",
            sourceEventSeqs=[1],
            message={
                "role": "assistant",
                "content": [{"type": "text", "text": "I will inspect the logs"}],
            },
        ),
        event(
            3,
            "tool/call",
            sourceEventSeqs=[2],
            call={"type": "tool_use", "id": "call-logs", "name": "logs", "input": {}},
        ),
        event(
            4,
            "tool/result",
            sourceEventSeqs=[3],
            toolCallId="call-logs",
            result={
                "type": "tool_result",
                "tool_use_id": "call-logs",
                "content": "[200 KB of raw logs]",
            },
        ),
        event(
            5,
            "llm/request",
            turn=2,
            model="mock-model",
            blocks=[
                {
                    "messageIndex": 0,
                    "blockIndex": 0,
                    "role": "user",
                    "blockType": "text",
                    "sourceEventSeqs": [1],
                    "contentHash": content_hash(INPUT),
                },
                block | {"sourceEventSeqs": summary_lineage, "contentHash": content_hash(SUMMARY)},
            ],
        ),
    ]


def test_content_hashes_are_the_references() -> None:
    assert content_hash(INPUT) == "243732fe76d275243da1f88c0aa55ba8b32006e83dc5216008baca5230e2b951"
    assert (
        content_hash(SUMMARY) == "d3202aeec6b83af10facae7e4cd8a9009d49986e4bca673d0fc6b8d2d9d673de"
    )


@pytest.mark.parametrize(
    ("lineage", "reason"), [([1, 2], "not-reproducible"), (None, "no-lineage")]
)
def test_the_acceptance_fixture_fails_at_the_summary_block(
    lineage: list[int] | None, reason: str
) -> None:
    result = verify_run(acceptance(lineage))
    assert not result.ok and result.inconclusive == []
    (failure,) = result.failures
    assert (failure.code, failure.reason, failure.seq) == ("MISSING_CONTEXT_REPLACE", reason, 5)
    assert (failure.message_index, failure.block_index) == (1, 0)
    assert failure.detail.startswith("Request 5 block at message 1, block 0 (text)")
    assert result.to_wire()["stats"] == {"events": 5, "requests": 1, "blocksChecked": 2}


def summarized() -> list[dict[str, Any]]:
    """The fixture as a journaled run writes it: the summary comes from a ``context/replace``."""
    events = acceptance([6])
    replace = event(
        6,
        "context/replace",
        strategy="summarize",
        replacements=[{"sourceEventSeqs": [2, 4], "block": SUMMARY}],
    )
    request = events.pop()
    request["seq"] = 7
    return [*events, replace, request]


def test_a_context_replace_that_carries_the_summary_makes_it_verify() -> None:
    result = verify_run(summarized())
    assert result.ok and result.failures == [] and result.inconclusive == []


@pytest.mark.parametrize(
    ("seqs", "reason"), [([1, 2, 2], "duplicate-sequence"), ([1, 3, 2], "out-of-order-sequence")]
)
def test_sequences_must_increase(seqs: list[int], reason: str) -> None:
    events = [dict(e, seq=s) for e, s in zip(acceptance([1])[:3], seqs, strict=True)]
    for e in events:
        e.pop("sourceEventSeqs", None)
    result = verify_run(events)
    (failure,) = result.failures
    assert (failure.code, failure.reason, failure.seq) == ("SEQ_NOT_MONOTONIC", reason, 2)


def test_a_window_that_starts_late_is_inconclusive_not_failed() -> None:
    result = verify_run(acceptance([1])[1:4])  # seqs 2, 3, 4: event 1 fell out of the window
    assert result.ok
    (gap,) = result.inconclusive
    assert (gap.seq, gap.missing_seqs) == (2, [1])
    assert gap.detail == "Event 2 names 1, which the readable window does not contain."


def test_a_reference_forward_is_a_broken_link() -> None:
    events = acceptance([1])
    events[2]["sourceEventSeqs"] = [9]
    (failure,) = [f for f in verify_run(events).failures if f.code == "BROKEN_LINK"]
    assert (failure.reason, failure.seq) == ("forward-reference", 3)
    assert failure.detail == "Event 3 names 9, which cannot precede event 3."


def test_an_empty_journal_verifies() -> None:
    assert verify_run([]).to_wire() == {
        "ok": True,
        "failures": [],
        "inconclusive": [],
        "stats": {"events": 0, "requests": 0, "blocksChecked": 0},
    }


def write(path: Path, events: list[dict[str, Any]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events) + tail)
    return path


def test_a_journal_file_reads_as_the_reference_reads_it(tmp_path: Path) -> None:
    events = acceptance([1])
    assert read_jsonl_journal(tmp_path / "absent.jsonl") == []
    cut = write(tmp_path / "cut.jsonl", events, tail='\n{"seq": 6, "type": "tu')
    assert read_jsonl_journal(cut) == events  # a last line cut short by a crash is left out
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(events[0]) + "\nnot json\n" + json.dumps(events[1]) + "\n")
    with pytest.raises(JournalReadError, match=r'line 2 of ".*broken.jsonl" is not valid JSON'):
        read_jsonl_journal(broken)
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"seq": 1}\n' + json.dumps(events[0]) + "\n")
    with pytest.raises(JournalReadError, match=r"line 1 .* is not a run event"):
        read_jsonl_journal(foreign)


def test_oma_verify_exits_by_what_it_found(tmp_path: Path) -> None:
    runner = CliRunner()
    good = runner.invoke(app, ["verify", str(write(tmp_path / "good.jsonl", summarized()))])
    assert good.exit_code == 0, good.output
    assert good.output.startswith("ok: 6 events, 1 requests, 2 blocks checked")
    bad = runner.invoke(
        app, ["verify", "--json", str(write(tmp_path / "bad.jsonl", acceptance(None)))]
    )
    assert bad.exit_code == 1
    assert json.loads(bad.output)["failures"][0]["reason"] == "no-lineage"
    unreadable = tmp_path / "x.jsonl"
    unreadable.write_text("[]\n[]\n")
    refused = runner.invoke(app, ["verify", str(unreadable)])
    assert refused.exit_code == 2 and "JOURNAL_UNREADABLE" in refused.output


def test_an_older_seq_again_is_out_of_order_not_a_duplicate() -> None:
    events = [dict(e, seq=s) for e, s in zip(acceptance([1])[:3], [1, 3, 1], strict=True)]
    for e in events:
        e.pop("sourceEventSeqs", None)
    (failure,) = verify_run(events).failures
    assert (failure.reason, failure.detail) == ("out-of-order-sequence", "Sequence 1 follows 3.")


def test_references_are_read_as_javascript_reads_numbers() -> None:
    events = acceptance([1])
    events[1]["sourceEventSeqs"] = [1.0]  # the same event 1
    events[2]["sourceEventSeqs"] = [True, "2"]  # no event: reported missing, as they are
    result = verify_run(events)
    (gap,) = result.inconclusive
    assert (gap.seq, gap.missing_seqs) == (3, [True, "2"])
    assert gap.detail == "Event 3 names true, 2, which the readable window does not contain."


def test_a_malformed_request_is_refused_not_guessed(tmp_path: Path) -> None:
    events = acceptance([1])
    events[4]["blocks"][0]["sourceEventSeqs"] = 1
    with pytest.raises(JournalShapeError, match="sourceEventSeqs is not a list"):
        verify_run(events)
    events[4]["blocks"] = [None]
    with pytest.raises(JournalShapeError, match="blocks is not a list of block descriptors"):
        verify_run(events)
    refused = CliRunner().invoke(app, ["verify", str(write(tmp_path / "m.jsonl", events))])
    assert refused.exit_code == 2 and "JOURNAL_UNREADABLE" in refused.output


def test_only_a_last_line_without_a_newline_may_be_torn(tmp_path: Path) -> None:
    events = acceptance([1])
    first = json.dumps(events[0])
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(first.encode() + b'\n{"seq": 2, "text": "caf\xc3')  # cut mid-character
    assert read_jsonl_journal(torn) == events[:1]
    ended = tmp_path / "ended.jsonl"
    ended.write_text(first + '\n{"seq":\n')  # a newline after it: it was written whole
    with pytest.raises(JournalReadError, match=r"line 2 .* is not valid JSON"):
        read_jsonl_journal(ended)
    blank = tmp_path / "blank.jsonl"
    blank.write_text(first + "\n   \n" + json.dumps(events[1]) + "\n")
    with pytest.raises(JournalReadError, match=r"line 2 .* is not valid JSON"):
        read_jsonl_journal(blank)
    odd = tmp_path / "odd.jsonl"
    odd.write_text(first + '\n{"type": []}\n{"timestampUnixMs": NaN}\n' + first + "\n")
    with pytest.raises(JournalReadError, match=r"line 2 .* is not a run event"):
        read_jsonl_journal(odd)
    nan = tmp_path / "nan.jsonl"
    nan.write_text(first + '\n{"seq": 2, "timestampUnixMs": NaN}\n' + first + "\n")
    with pytest.raises(JournalReadError, match=r"line 2 .* is not valid JSON"):
        read_jsonl_journal(nan)
    whole = tmp_path / "whole.jsonl"
    whole.write_text(json.dumps(dict(events[0], seq=1.0)) + "\n")
    assert read_jsonl_journal(whole)[0]["seq"] == 1
