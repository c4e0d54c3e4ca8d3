"""oma.redaction: every example of reference §1.4 and each rule on its own."""

from __future__ import annotations

import json
import re
import time

import pytest

from oma.redaction import (
    REDACTED,
    compile_patterns,
    is_sensitive_name,
    redact_structure,
    redact_text,
    redact_value,
)

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7v\nq0x9+abc/def==\n"
    "-----END RSA PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("password=hunter2", "password=[redacted]"),
        ("apiKey=abc123", "apiKey=[redacted]"),
        ("secret=topsecret", "secret=[redacted]"),
        ('password="hunter2"', 'password="[redacted]"'),
        ("the api key is sk-abcdefghijklmnop", "the api key is [redacted]"),
        ("42", "42"),
    ],
)
def test_reference_examples(given: str, expected: str) -> None:
    assert redact_value(given) == expected


@pytest.mark.parametrize(
    "name",
    [
        "api_key", "API-KEY", "apikey", "openai_api_key", "secret", "clientSecret", "password",
        "passwd", "pwd", "private_key", "private-key", "privateKey", "access_key", "accessKey",
        "access-key", "accessToken", "refreshToken", "idToken", "githubToken", "Authorization",
        "auth_token", "auth-token", "authToken", "cookie", "Set-Cookie", "session", "sessionId",
        "credential", "credentials", "bearer", "token", "TOKEN", "csrf_token", "x-token",
        "token_id", "token-type",
    ],
)  # fmt: skip
def test_sensitive_names(name: str) -> None:
    assert is_sensitive_name(name)


@pytest.mark.parametrize(
    "name",
    ["tokenUsage", "input_tokens", "tokens", "max_tokens", "author", "key", "name", "tokenizer"],
)
def test_names_that_are_not_sensitive(name: str) -> None:
    assert not is_sensitive_name(name)


def test_rule_1_pem_private_key_blocks_multi_line() -> None:
    text = f"before\n{PEM}\nafter -----BEGIN PUBLIC KEY----- stays"
    assert redact_text(text) == "before\n[redacted]\nafter -----BEGIN PUBLIC KEY----- stays"
    assert redact_text("-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----") == REDACTED
    assert redact_text("-----BEGIN OPENSSH PRIVATE KEY-----\nunterminated") == (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nunterminated"
    )


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("Authorization: Bearer abc.def-ghi", "Authorization: [redacted]"),
        ("authorization: Basic dXNlcjpwYXNz\nnext", "authorization: [redacted]\nnext"),
        ("Authorization:tok1, Accept: */*", "Authorization:[redacted], Accept: */*"),
        ("{Authorization: xyz} tail", "{Authorization: [redacted]} tail"),
        ("Authorization: abc; rest", "Authorization: [redacted]; rest"),
    ],
)
def test_rule_2_authorization_header_keeps_the_label(given: str, expected: str) -> None:
    assert redact_text(given) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("call with Bearer abcdefgh123 ok", "call with Bearer [redacted] ok"),
        ("bearer eyJhbGciOi.J9.x_y~z+/= end", "bearer [redacted] end"),
        ("Bearer short", "Bearer short"),  # fewer than 8 token characters
    ],
)
def test_rule_3_bearer_tokens(given: str, expected: str) -> None:
    assert redact_text(given) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ('password: "two words here"', 'password: "[redacted]"'),
        ("api_key='abc def'", "api_key='[redacted]'"),
        ('{"secret":"s3cr3t", "name":"x"', '{"secret":"[redacted]", "name":"x"'),
        ("'sessionId' = 'abc'", "'sessionId' = '[redacted]'"),
        ('token: "with \\" escaped quote" after', 'token: "[redacted]" after'),
        ('name: "public"', 'name: "public"'),
    ],
)
def test_rule_4_quoted_assignments(given: str, expected: str) -> None:
    assert redact_text(given) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("pwd: hunter2, user: bob", "pwd: [redacted], user: bob"),
        ("DB_PASSWORD=p@ss;next=1", "DB_PASSWORD=[redacted];next=1"),
        ("{token: abc}", "{token: [redacted]}"),
        ("[cookie=a=b]", "[cookie=[redacted]]"),
        ("secret = value with spaces\nline2", "secret = [redacted]\nline2"),
        ("tokenUsage: 1234, input_tokens=5", "tokenUsage: 1234, input_tokens=5"),
        ("password=\nnext line", "password=\nnext line"),
    ],
)
def test_rule_5_unquoted_assignments(given: str, expected: str) -> None:
    assert redact_text(given) == expected


def test_rule_5_skips_values_already_redacted() -> None:
    assert redact_text("Authorization: Bearer abcdefghijkl") == "Authorization: [redacted]"
    assert redact_text('password="x"') == 'password="[redacted]"'


@pytest.mark.parametrize(
    "token",
    [
        "sk-" + "a" * 16,
        "sk-proj-" + "A1_-" * 8,
        "ghp_" + "x" * 20,
        "gho_" + "Y" * 36,
        "ghu_" + "1" * 20,
        "ghs_" + "a" * 20,
        "ghr_" + "b" * 20,
        "github_pat_" + "c" * 22,
        "AKIA" + "ABCDEFGHIJ234567",
        "xoxb-1234567890-abc",
        "xoxp-" + "9" * 10,
    ],
)
def test_rule_6_token_literals(token: str) -> None:
    assert redact_text(f"use {token} now") == "use [redacted] now"


@pytest.mark.parametrize(
    "text",
    ["sk-" + "a" * 15, "ghx_" + "x" * 20, "ghp_" + "x" * 19, "AKIA" + "abc", "xoxz-1234567890"],
)
def test_rule_6_leaves_near_misses(text: str) -> None:
    assert redact_text(text) == text


def test_rule_7_custom_patterns_replace_every_match() -> None:
    patterns = compile_patterns([re.compile(r"EMP-\d{4}"), r"acct#\w+"])
    text = "EMP-1234 and EMP-9876 paid from acct#abc"
    assert redact_text(text, patterns) == "[redacted] and [redacted] paid from [redacted]"


def test_custom_patterns_run_after_the_defaults() -> None:
    # The default already replaced the value, so a pattern for the raw value finds nothing.
    patterns = compile_patterns([r"hunter2"])
    assert redact_text("password=hunter2 hunter2", patterns) == "password=[redacted]"


def test_structural_redaction_of_json_objects() -> None:
    value = json.dumps(
        {
            "user": "bob",
            "password": {"nested": "whole value replaced"},
            "sessionId": 12345,
            "tokenUsage": {"input_tokens": 10, "output_tokens": 20},
            "notes": ["call with Bearer abcdefghijk", 7, None, True],
            "headers": {"Authorization": "Bearer x", "Accept": "json"},
            "text": "my key is sk-abcdefghijklmnopq",
        },
        indent=2,
    )
    redacted = redact_value("   \n" + value)
    assert redacted == (
        '{"user":"bob","password":"[redacted]","sessionId":"[redacted]",'
        '"tokenUsage":{"input_tokens":10,"output_tokens":20},'
        '"notes":["call with Bearer [redacted]",7,null,true],'
        '"headers":{"Authorization":"[redacted]","Accept":"json"},'
        '"text":"my key is [redacted]"}'
    )


def test_structural_redaction_of_arrays_and_scalars() -> None:
    assert (
        redact_value('[{"token": 1}, "password=x", 2.5]')
        == '[{"token":"[redacted]"},"password=[redacted]",2.5]'
    )
    assert redact_structure(None) is None
    assert redact_structure(3) == 3


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # A JSON string scalar is free text; an unquoted value runs to , ; } ] or newline,
        # so the closing quote goes with it (the reference's rule, lossy on purpose).
        ('"password=x"', '"password=[redacted]'),
        ("{not json password=abc", "{not json password=[redacted]"),
        ("[NaN, password=1]", "[NaN, password=[redacted]]"),  # NaN is not JSON
        ("true", "true"),
        ("", ""),
    ],
)
def test_values_that_are_not_json_objects_are_free_text(given: str, expected: str) -> None:
    assert redact_value(given) == expected


def test_unicode_survives_structural_redaction() -> None:
    assert (
        redact_value('{"msg": "grüße 🚀", "pwd": "x"}') == '{"msg":"grüße 🚀","pwd":"[redacted]"}'
    )


def test_large_values_redact_in_linear_time() -> None:
    values = ["x" * 1_000_000, "password" * 100_000, ("a=" * 200_000), "'" * 500_000]
    start = time.monotonic()
    for value in values:
        redact_value(value)
    assert time.monotonic() - start < 10  # quadratic behaviour would take minutes
