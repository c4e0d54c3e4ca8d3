"""oma.visible: what a reviewer reads shows every control, bidi, line-breaking and invisible
character as an escape, and JSON stays JSON (it parses to the same value)."""

from __future__ import annotations

import json

import pytest

from oma.visible import LEGEND, hides, hides_in, visible, visible_json

HOSTILE = [
    ("\x1b[8m", "\\x1b[8m"),  # conceal: what follows is not shown
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),  # OSC: sets the terminal title
    ("\u2028", "\\u2028"),  # line separator
    ("\u2029", "\\u2029"),  # paragraph separator
    ("\u202e", "\\u202e"),  # right-to-left override
    ("\u2066\u2069", "\\u2066\\u2069"),  # isolates
    ("\u200e\u200f\u061c", "\\u200e\\u200f\\u061c"),  # marks
    ("\u200b\u200d\ufeff\u2060", "\\u200b\\u200d\\ufeff\\u2060"),  # zero width
    ("\r", "\\r"),
    ("\n", "\\n"),
    ("\t", "\\t"),
    ("\x00\x7f", "\\x00\\x7f"),  # NUL, DEL
    ("\x85\x9b", "\\x85\\x9b"),  # C1: next line, CSI
    ("\U000e0041", "\\U000e0041"),  # a tag character (invisible, beyond the BMP)
    ("\u3164", "\\u3164"),  # Hangul filler: a letter that shows nothing
    ("\ud800", "\\ud800"),  # a lone surrogate (legal in content, unprintable)
]


@pytest.mark.parametrize(("raw", "shown"), HOSTILE)
def test_every_hidden_character_becomes_its_escape(raw: str, shown: str) -> None:
    assert visible(f"a{raw}b") == f"a{shown}b"
    assert hides(raw)


def test_what_a_person_reads_as_text_is_left_alone() -> None:
    for text in ('plain ascii, with \\ and "quotes"', "Zürich €5 日本語 🙂", "a b", ""):
        assert visible(text) == text
        assert not hides(text)


def test_json_keeps_its_layout_and_parses_to_the_same_value() -> None:
    value = {
        "note": "pay\u202e\u2028\x7f\x9b\u200b\U000e0041 now\r\n\x1b[8m",
        "\u202ekey": ["Zürich", 1],
    }
    text = json.dumps(value, ensure_ascii=False, indent=2)
    shown = visible_json(text)
    assert json.loads(shown) == value
    assert shown.splitlines()[0] == "{" and len(shown.splitlines()) == len(text.split("\n"))
    for raw, _ in HOSTILE[:-1]:
        if raw not in "\n\t":  # the layout's own newlines and indentation stay
            assert raw not in shown
    assert "\\u202e" in shown and "\\udb40\\udc41" in shown and "Zürich" in shown


def test_json_with_a_lone_surrogate_becomes_printable() -> None:
    text = json.dumps({"k": "\ud800"}, ensure_ascii=False)
    shown = visible_json(text)
    shown.encode("utf-8")  # printable: no UnicodeEncodeError
    assert json.loads(shown) == {"k": "\ud800"}


def test_hides_in_looks_at_every_key_and_string_of_json_data() -> None:
    assert not hides_in({"a": [1, 2.5, None, True, {"b": "ok"}]})
    assert hides_in({"a": [{"b": "x\u202e"}]})
    assert hides_in({"a\u2028": 1})
    assert hides_in("\x1b")
    assert not hides_in(7)


def test_the_legend_says_what_the_escapes_are() -> None:
    assert "escaped" in LEGEND and "\\u" in LEGEND
    assert not hides(LEGEND)
