"""The parts a tool may show the model (``oma.llm.parts``): what is accepted, what is refused
with the part named, and the text view a record keeps."""

from __future__ import annotations

from typing import Any

import pytest

from oma.llm.parts import RichContentError, check_parts, has_media, summary_text
from oma.tools import ToolResult


def _image(data: str, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


@pytest.mark.parametrize(
    ("data", "sent"),
    [
        ("aW1hZ2U=", "aW1hZ2U="),
        ("aW1hZ2U", "aW1hZ2U="),  # padding added: what every decoder takes
        ("iVBORw0KGgo=", "iVBORw0KGgo="),
        ("YWJj", "YWJj"),
        ("YQ==", "YQ=="),
        ("YQ", "YQ=="),
        ("AAA", "AAA="),
        ("AAAA==", "AAAA"),  # over-padded, as the reference accepts it: kept as canonical
    ],
)
def test_base64_with_or_without_padding_is_accepted_as_canonical(data: str, sent: str) -> None:
    assert check_parts([_image(data)]) == [_image(sent)]


@pytest.mark.parametrize(
    "data",
    [
        "data:image/png;base64,aW1hZ2U=",  # a data URL, not the data
        "aW1h Z2U=",  # whitespace
        "aW1hZ2U=x",  # text after the padding
        "YR==",  # bits beyond the last byte: does not encode back the same
        "Y",  # a length no encoding has
        "===",
    ],
)
def test_what_is_not_plain_base64_is_refused(data: str) -> None:
    with pytest.raises(RichContentError, match=r"model_output\[0\]\.source\.data must be base64"):
        check_parts([_image(data)])


@pytest.mark.parametrize("media_type", ["image/png; charset=x", "png", "/png", " image/png"])
def test_media_types_are_bare_mime_types(media_type: str) -> None:
    with pytest.raises(RichContentError, match="media_type"):
        check_parts([_image("YWJj", media_type)])


def test_unknown_keys_are_dropped_and_strings_pass_as_they_are() -> None:
    part = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    assert check_parts([part]) == [{"type": "text", "text": "hi"}]
    assert check_parts("plain") == "plain"
    with pytest.raises(RichContentError, match="a string or a list of parts, not bytes"):
        check_parts(b"raw")
    with pytest.raises(RichContentError, match=r"model_output\[1\] must be a part object"):
        check_parts([{"type": "text", "text": "a"}, "b"])


def test_the_record_keeps_text_and_placeholders_never_bytes_or_urls() -> None:
    url_file = {
        "type": "file",
        "filename": "r.pdf",
        "source": {"type": "url", "media_type": "application/pdf", "url": "https://x/r.pdf"},
    }
    parts = [{"type": "text", "text": "a"}, _image("YWJj"), url_file]
    assert summary_text(parts) == (
        "a\n[image: image/png; inline data]\n[file: r.pdf; application/pdf; URL reference]"
    )
    assert has_media(parts) and not has_media([{"type": "text", "text": "a"}])
    result = ToolResult("app data", model_output=parts).checked("t")
    assert result.content == parts and result.summary == summary_text(parts)
    assert ToolResult("only text").content == "only text"
    bad = ToolResult("x", model_output=[{"type": "image"}]).checked("draw")
    assert bad.is_error and bad.data.startswith('Tool "draw" returned content')


@pytest.mark.parametrize("url", [" https://x/a.png", "https://x/a.png\n", "https://x/a b.png"])
def test_a_url_with_blanks_or_control_characters_is_refused(url: str) -> None:
    """urlsplit drops them before it checks; the URL sent would keep them."""
    image = {"type": "image", "source": {"type": "url", "media_type": "image/png", "url": url}}
    with pytest.raises(RichContentError, match="spaces or control characters"):
        check_parts([image])
