"""open_store(url): one string names any store; passwords never appear in its errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from oma.store import (
    FileStore,
    InMemoryStore,
    PostgresStore,
    RedactingStore,
    RedisStore,
    open_store,
    redact_url,
)


def test_memory_and_file(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), InMemoryStore)
    store = open_store(f"file://{tmp_path}/state%20file.json")
    assert isinstance(store, FileStore) and store.path == tmp_path / "state file.json"
    relative = open_store("file:state.json")
    assert isinstance(relative, FileStore) and relative.path == Path.cwd() / "state.json"
    assert isinstance(open_store("memory://", redact=True), RedactingStore)


async def test_network_stores_are_built_lazily() -> None:
    redis_store = open_store("rediss://u:pw@example.invalid:6380/2", namespace="ns")
    assert isinstance(redis_store, RedisStore) and redis_store.namespace == "ns"
    assert "pw" not in repr(redis_store)
    await redis_store.aclose()
    pg = open_store("postgres://u:pw@example.invalid/db", table="t", schema="s")
    assert isinstance(pg, PostgresStore) and pg.qualified_name == "s.t"
    assert ":pw@" not in repr(pg)


@pytest.mark.parametrize(
    "url", ["mysql://root:hunter2@db/x", "hunter2", "file://otherhost/x", "file://"]
)
def test_bad_urls_are_value_errors_without_the_password(url: str) -> None:
    with pytest.raises(ValueError, match="store URL") as caught:
        open_store(url)
    assert "hunter2" not in str(caught.value) or url == "hunter2"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://:s3cret@h:1/0", "redis://:***@h:1/0"),
        ("rediss://user:p%40ss@h/0?ssl_ca_certs=/ca.pem", "rediss://user:***@h/0?ssl_ca_certs=/ca.pem"),
        ("redis://h:1/0", "redis://h:1/0"),
        ("postgresql://u@h/db?password=s3cret&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
        ("host=h user=u password=s3cret dbname=d", "host=h user=u password=*** dbname=d"),
        ("host=h password='it''s secret' port=5", "host=h password=*** port=5"),
        # Unencoded /, #, ? or @ in a password end the authority for a URL parser, which then
        # finds no password at all: the userinfo is found by position instead.
        ("redis://:ab/cd@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://:ab#cd@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://u:ab?cd@h/0", "redis://u:***@h/0"),
        ("postgresql://u:p@ss/w?rd#x@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
    ],
)  # fmt: skip
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


@pytest.mark.parametrize(
    ("url", "passwords"),
    [
        ("redis://:ab/cd@h/0", ("ab/cd",)),
        ("redis://:p%40ss@h/0", ("p%40ss", "p@ss")),
        ("redis://user@h/0", ()),
        ("redis://h/0", ()),
    ],
)
def test_url_passwords_are_found_however_the_url_is_written(
    url: str, passwords: tuple[str, ...]
) -> None:
    from oma.store.remote import url_passwords

    assert url_passwords(url) == passwords


@pytest.mark.parametrize(
    ("url", "encoded"),
    [
        ("redis://:ab/cd@h:6379/0", "redis://:ab%2Fcd@h:6379/0"),
        ("redis://u:a#b?c@d@h/0", "redis://u:a%23b%3Fc%40d@h/0"),
        ("redis://:p%40ss@h/0", "redis://:p%40ss@h/0"),  # already encoded: as written
        ("redis://h/0", "redis://h/0"),
    ],
)
def test_a_password_is_encoded_for_the_drivers(url: str, encoded: str) -> None:
    from oma.store.remote import encode_password

    assert encode_password(url) == encoded


def test_a_driver_never_sees_pieces_of_an_unencoded_password() -> None:
    """redis-py parsed redis://:pa/ss... as host '', port 'pa', and said so in its error."""
    store = open_store("redis://:pa/ss#wo?rd@x@127.0.0.1:9/0")
    assert "pa/ss" not in repr(store) and "127.0.0.1:9" in repr(store)
