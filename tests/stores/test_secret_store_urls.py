"""Store URLs read from secrets (a Kubernetes Secret, the env variable a Secret fills): only the
schemes the caller allows are opened, and no error, repr or traceback shows any of the value;
in every URL shown anywhere, the password and every secret query parameter are masked.

The hostile case behind it: a Secret key that holds a bare password instead of a URL. The URL
parse error quoted the value, and the operator copied it into a TeamRun's status, conditions,
Events and log.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

from oma.assemble import open_store as open_spec_store
from oma.cli.run import describe_store
from oma.errors import StoreAuthError, StoreConfigError, StoreUnavailableError
from oma.spec import StoreSpec
from oma.store import PostgresStore, RedisStore, open_store, redact_url
from oma.store.base import close_store
from oma.store.remote import mask_secret, url_passwords
from oma.store.urls import (
    POSTGRES_SCHEMES,
    REDIS_SCHEMES,
    TEAMRUN_SCHEMES,
    open_secret_store,
)
from tests.servers.postgres_server import PostgresServer
from tests.servers.process import free_port
from tests.servers.redis_server import RedisServer

SECRET = "hunter2-S3cret!"
WHERE = "Secret team-a/store key url"


def pieces(secret: str, size: int = 6) -> list[str]:
    """Every run of ``size`` characters of ``secret``: none may show (shorter runs are words of
    the code a traceback quotes)."""
    return [secret[i : i + size] for i in range(max(1, len(secret) - size + 1))]


def shown(error: BaseException) -> str:
    """Everything an error can show: its text, its repr and its whole traceback and chain."""
    return "\n".join([str(error), repr(error), *traceback.format_exception(error)])


def assert_hidden(text: str, *secrets: str) -> None:
    for secret in secrets:
        for piece in pieces(secret):
            assert piece not in text, f"{piece!r} of a secret shows in: {text}"


def refused(url: str, schemes: tuple[str, ...] = REDIS_SCHEMES, **options: str) -> StoreConfigError:
    with pytest.raises(StoreConfigError) as caught:
        open_secret_store(
            url,
            WHERE,
            schemes=schemes,
            user="a TeamRun's store",
            namespace=options.get("namespace"),
            table=options.get("table"),
            schema=options.get("schema"),
        )
    error = caught.value
    assert str(error).startswith(f"the store URL in {WHERE} "), str(error)
    assert error.transient is False and error.code == "STORE_CONFIG"
    assert error.__cause__ is None and error.__context__ is None  # nothing chained to show
    return error


@pytest.mark.parametrize(
    "value",
    [
        SECRET,
        f"{SECRET}\n",  # as `echo` writes it into a Secret
        f"  {SECRET}",
        "hunter2:S3cret!",  # a colon: not to be taken for a scheme and quoted
        "hunter2://S3cret!",  # not a scheme oma knows: not named
        "user=oma password=hunter2-S3cret! host=db",  # a libpq key=value DSN
        "",
    ],
)
@pytest.mark.parametrize("schemes", [REDIS_SCHEMES, POSTGRES_SCHEMES, TEAMRUN_SCHEMES])
def test_a_secret_that_is_not_a_store_url_is_refused_showing_none_of_it(
    value: str, schemes: tuple[str, ...]
) -> None:
    error = refused(value, schemes)
    assert "is not a" in str(error) or "is empty" in str(error)
    assert_hidden(shown(error), SECRET, "S3cret!")


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("file:///tmp/x-hunter2-S3cret!", "file"),
        ("memory://", "memory"),
        ("MEMORY://", "memory"),
        ("postgresql://u:hunter2-S3cret!@db/x", "postgresql"),
    ],
)
def test_a_scheme_the_store_may_not_use_is_refused_and_named(url: str, scheme: str) -> None:
    error = refused(url, REDIS_SCHEMES)
    assert f"has scheme {scheme!r}, which a TeamRun's store may not use" in str(error)
    assert "use redis:// or rediss://" in str(error)
    assert_hidden(shown(error), SECRET, "/tmp/x")


def test_only_the_teamrun_schemes_are_teamrun_schemes() -> None:
    assert set(TEAMRUN_SCHEMES) == {"redis", "rediss", "postgres", "postgresql"}
    error = refused("file:///tmp/x", TEAMRUN_SCHEMES)
    assert "use redis://, rediss://, postgresql:// or postgres://" in str(error)


@pytest.mark.parametrize(
    ("url", "options", "problem"),
    [
        (f"redis://:{SECRET}@db:6y79/0", {}, "has a port that is not a number"),
        (f"redis://:{SECRET}@db:99999/0", {}, "has a port that is not a number"),
        (f"redis://:{SECRET}@db/0?namespace=S3cret!{{x}}", {}, "?namespace="),
        (f"redis://:{SECRET}@db/0?namespace=S3cret!", {"namespace": "b"}, "?namespace="),
        (f"postgresql://u:{SECRET}@db/x?table=S3cret!", {}, "?table="),
        (f"postgresql://u:{SECRET}@db/x?schema=S3cret!", {"schema": "s"}, "?schema="),
        (f"redis://:{SECRET}@db/0?socket_timeout=S3cret!", {}, "cannot be opened"),
    ],
)
def test_a_url_the_store_cannot_use_is_refused_saying_why_but_not_what(
    url: str, options: dict[str, str], problem: str
) -> None:
    error = refused(url, TEAMRUN_SCHEMES, **options)
    assert problem in str(error)
    assert_hidden(shown(error), SECRET, "S3cret!", "6y79", "99999")


async def test_a_usable_secret_url_opens_its_store() -> None:
    redis = open_secret_store(
        f"redis://:{SECRET}@db.invalid:6379/0?namespace=team-a",
        WHERE,
        schemes=REDIS_SCHEMES,
        user="a TeamRun's store",
    )
    assert isinstance(redis, RedisStore) and redis.namespace == "team-a"
    assert_hidden(repr(redis), SECRET)
    await close_store(redis)
    pg = open_secret_store(
        f"postgres://u:{SECRET}@db.invalid/x?table=t", WHERE, schemes=POSTGRES_SCHEMES, user="x"
    )
    assert isinstance(pg, PostgresStore) and pg.table == "t"
    await close_store(pg)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://u:pw1@h/db?sslmode=require&sslpassword=topsecret&sslkey=/k.pem",
            "postgresql://u:***@h/db?sslmode=require&sslpassword=***&sslkey=/k.pem",
        ),
        ("postgresql://h/db?SSLPassword=topsecret", "postgresql://h/db?SSLPassword=***"),
        ("postgresql://h/db?ssl%70assword=topsecret", "postgresql://h/db?ssl%70assword=***"),
        (
            "rediss://:pw@h/0?ssl_password=topsecret&ssl_keyfile=/k.pem",
            "rediss://:***@h/0?ssl_password=***&ssl_keyfile=/k.pem",
        ),
        (
            "redis://h/0?auth_token=t1&client_secret=t2&credential=t3&token=t4&db=1",
            "redis://h/0?auth_token=***&client_secret=***&credential=***&token=***&db=1",
        ),
        (
            "host=h sslpassword=topsecret password='it''s' dbname=d",
            "host=h sslpassword=*** password=*** dbname=d",
        ),
    ],
)
def test_every_secret_query_parameter_is_masked(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_secret_parameters_are_among_the_secrets_a_store_scrubs() -> None:
    url = "postgresql://u:pw%40x@h/db?sslpassword=top%20secret&application_name=a"
    assert set(url_passwords(url)) == {"pw%40x", "pw@x", "top%20secret", "top secret"}


async def test_every_display_of_a_url_masks_its_secrets() -> None:
    pg_url = f"postgresql://u:{SECRET}@db.invalid/x?sslpassword=Zq9-ssl-Kx7wv"
    redis_url = f"redis://:{SECRET}@db.invalid:6379/0"
    pg = open_store(pg_url)
    redis = open_store(redis_url)
    try:
        assert_hidden(repr(pg) + repr(redis), SECRET, "Zq9-ssl-Kx7wv")
    finally:
        await close_store(pg)
        await close_store(redis)
    banners = [
        describe_store(StoreSpec.model_validate({"postgres": {"dsn": pg_url}}), Path("x")),
        describe_store(StoreSpec.model_validate({"redis": {"url": redis_url}}), Path("x")),
    ]
    assert_hidden("\n".join(banners), SECRET, "Zq9-ssl-Kx7wv")
    with pytest.raises(StoreConfigError) as conflict:  # a message that quotes the URL
        open_store(f"{pg_url}&table=a", table="b")
    assert_hidden(shown(conflict.value), SECRET, "Zq9-ssl-Kx7wv")
    mysql = f"mysql://u:{SECRET}@db/x?sslpassword=Zq9-ssl-Kx7wv"
    with pytest.raises(StoreConfigError) as unsupported:
        open_store(mysql)
    assert_hidden(shown(unsupported.value), SECRET, "Zq9-ssl-Kx7wv")


def test_mask_secret_masks_the_value_however_it_is_written() -> None:
    value = "redis://:p%40ss-w0rd@db:6379/0?ssl_password=topsecret\n"
    text = (
        f"driver: {value!r}; again {value.strip()}; decoded p@ss-w0rd; raw p%40ss-w0rd; "
        "key topsecret"
    )
    masked = mask_secret(text, value)
    assert_hidden(masked, "p%40ss-w0rd", "p@ss-w0rd", "topsecret", "db:6379")
    assert mask_secret(f"was {SECRET}.", SECRET) == "was ***."
    assert mask_secret("nothing here", "") == "nothing here"


@pytest.mark.parametrize(
    ("kind", "scheme"), [("redis", "memory"), ("redis", "file"), ("postgres", "redis")]
)
def test_a_spec_store_url_from_the_environment_is_a_secret_too(
    monkeypatch: pytest.MonkeyPatch, kind: str, scheme: str
) -> None:
    """What a runner pod opens: the run spec names the variable, a Secret fills it."""
    field = {"redis": "urlEnv", "postgres": "dsnEnv"}[kind]
    spec = StoreSpec.model_validate({kind: {field: "OMA_STORE_URL"}})
    monkeypatch.setenv("OMA_STORE_URL", SECRET)
    with pytest.raises(StoreConfigError) as bare:
        open_spec_store(spec, Path("unused.json"))
    assert str(bare.value).startswith("the store URL in $OMA_STORE_URL is not a")
    assert_hidden(shown(bare.value), SECRET)
    monkeypatch.setenv("OMA_STORE_URL", f"{scheme}:///tmp/{SECRET}")
    with pytest.raises(StoreConfigError) as other:
        open_spec_store(spec, Path("unused.json"))
    assert f"has scheme {scheme!r}" in str(other.value)
    assert_hidden(shown(other.value), SECRET)


def test_a_spec_store_url_written_in_the_spec_must_match_its_store_too() -> None:
    spec = StoreSpec.model_validate({"redis": {"url": "file:///tmp/state.json"}})
    with pytest.raises(StoreConfigError, match=r"'file:///tmp/state\.json'.*redis://"):
        open_spec_store(spec, Path("unused.json"))


async def test_a_redis_error_shows_no_password_anywhere() -> None:
    url = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"
    store = open_secret_store(url, WHERE, schemes=REDIS_SCHEMES, user="x")
    assert isinstance(store, RedisStore)
    try:
        with pytest.raises(StoreUnavailableError) as caught:
            await store.get("k")
    finally:
        await close_store(store)
    assert_hidden(shown(caught.value), SECRET)


async def test_a_postgres_error_shows_neither_password_nor_ssl_password(
    postgres_server: PostgresServer,
) -> None:
    dsn = postgres_server.dsn(password=SECRET) + "?sslmode=disable&sslpassword=Zq9-ssl-Kx7wv"
    store = open_secret_store(dsn, WHERE, schemes=POSTGRES_SCHEMES, user="x")
    assert isinstance(store, PostgresStore)
    try:
        with pytest.raises(StoreAuthError) as caught:
            await store.get("k")
    finally:
        await close_store(store)
    assert "password authentication failed" in str(caught.value)
    assert_hidden(shown(caught.value), SECRET, "Zq9-ssl-Kx7wv")


async def test_a_good_secret_url_works_against_real_servers(
    redis_server: RedisServer, postgres_server: PostgresServer
) -> None:
    for url, schemes in (
        (redis_server.url + "?namespace=secret-urls", REDIS_SCHEMES),
        (postgres_server.dsn() + "?sslmode=disable&table=secret_urls", POSTGRES_SCHEMES),
    ):
        store = open_secret_store(url, WHERE, schemes=schemes, user="x")
        try:
            await store.set("k", "v")
            entry = await store.get("k")
            assert entry is not None and entry.value == "v"
            await store.delete("k")
        finally:
            await close_store(store)
