"""open_store(url): one string names any store; passwords never appear in its errors."""

from __future__ import annotations

from collections.abc import Callable
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


async def test_store_options_ride_in_the_url_query() -> None:
    redis_store = open_store("redis://u:p?w#d@example.invalid:6379/0?namespace=team-a&ssl=false")
    assert isinstance(redis_store, RedisStore) and redis_store.namespace == "team-a"
    await redis_store.aclose()
    pg = open_store("postgresql://u:p@example.invalid/db?sslmode=disable&schema=runs&table=t")
    assert isinstance(pg, PostgresStore) and pg.qualified_name == "runs.t"
    same = open_store("redis://example.invalid/0?namespace=n", namespace="n")
    assert isinstance(same, RedisStore) and same.namespace == "n"
    await same.aclose()
    with pytest.raises(ValueError, match="sets namespace='a' but namespace='b' was also given"):
        open_store("redis://:hunter2@example.invalid/0?namespace=a", namespace="b")
    with pytest.raises(ValueError, match="namespace must be non-empty") as caught:
        open_store("redis://:hunter2@example.invalid/0?namespace=a{b}")
    assert "hunter2" not in str(caught.value)


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


def test_wrong_store_settings_are_typed_permanent_errors() -> None:
    from oma.errors import StoreConfigError

    builds: list[Callable[[], object]] = [
        lambda: open_store("http://u:hunter2@cache.example:6379/0"),
        lambda: RedisStore("redis://h", namespace="a{b}"),
        lambda: PostgresStore("postgresql://h/db", table="t" * 49),
        lambda: PostgresStore("postgresql://h/db", schema="my-schema"),
    ]
    for build in builds:
        with pytest.raises(StoreConfigError) as caught:
            build()
        assert caught.value.code == "STORE_CONFIG" and isinstance(caught.value, ValueError)
        assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("store", "field"),
    [
        ({"postgres": {"dsn": "postgresql://h/db", "table": "t" * 49}}, "table"),
        ({"postgres": {"dsn": "postgresql://h/db", "schema": "my-schema"}}, "schema"),
        ({"redis": {"url": "redis://h", "namespace": "a{b}"}}, "namespace"),
    ],
)
def test_the_run_spec_refuses_what_the_store_would(store: dict[str, object], field: str) -> None:
    from pydantic import ValidationError

    from oma.spec import RunSpec

    with pytest.raises(ValidationError, match=field):
        RunSpec.model_validate(
            {
                "agents": [{"name": "a", "model": {"provider": "scripted", "script": []}}],
                "tasks": [{"title": "t", "description": "d"}],
                "store": store,
            }
        )


def test_oma_run_with_a_url_no_store_speaks_exits_2_with_one_line(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from oma.cli import app

    spec = {
        "agents": [{"name": "a", "model": {"provider": "scripted", "script": [{"text": "x"}]}}],
        "tasks": [{"title": "t", "description": "d"}],
        "store": {"redis": {"urlEnv": "WEB_URL"}},
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    result = CliRunner(env={"WEB_URL": "http://u:hunter2@h/0"}).invoke(app, ["run", str(path)])
    assert result.exit_code == 2, result.output
    # From the environment, the URL is a secret: where it came from, nothing of it.
    assert "the store URL in $WEB_URL is not a redis:// or rediss:// URL" in result.output
    assert "Traceback" not in result.output
    assert "hunter2" not in result.output and "http" not in result.output
