"""A run spec's store URL may carry the store's own options (``?namespace=``, ``?table=``,
``?schema=``), as ``--store`` and ``$OMA_STORE_URL`` do (docs/stores.md, docs/cli.md).

The spec's defaults (namespace ``oma``, table ``oma_store``) apply only when neither the spec
field nor the URL names a value; a value in both, different, is refused in one line. Pure: the
stores are built through ``oma.assemble.open_store`` (what ``oma run`` and the runner use) and
never connect.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oma.assemble import open_store
from oma.cli.run import describe_store
from oma.errors import StoreConfigError
from oma.spec import RunSpec, StoreSpec, load_run_spec
from oma.store import PostgresStore, PrefixedStore, RedactingStore, RedisStore
from oma.store.base import MemoryStore

AGENT = {"name": "w", "model": {"provider": "scripted", "script": [{"text": "done"}]}}
REDIS = "redis://:s3cret@127.0.0.1:6390/0"
PG = "postgresql://oma:s3cret@127.0.0.1:5439/db"


@pytest.fixture(autouse=True)
def _no_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OMA_FAULT_KILL_AT", "OMA_FAULT_LOG", "OMA_FAULT_PAUSE_AT"):
        monkeypatch.delenv(name, raising=False)


def _spec(store: dict[str, Any]) -> RunSpec:
    return RunSpec.model_validate(
        {"agents": [AGENT], "tasks": [{"title": "T", "description": "d"}], "store": store}
    )


def _open(store: dict[str, Any]) -> MemoryStore:
    spec = _spec(store)
    assert spec.store is not None
    return open_store(spec.store, Path("unused.json"))


def _redis(store: dict[str, Any]) -> RedisStore:
    opened = _open({"redis": store})
    assert isinstance(opened, RedisStore), opened
    return opened


def _postgres(store: dict[str, Any]) -> PostgresStore:
    opened = _open({"postgres": store})
    assert isinstance(opened, PostgresStore), opened
    return opened


@pytest.mark.parametrize(
    ("store", "namespace"),
    [
        pytest.param({"url": REDIS}, "oma", id="neither: the default"),
        pytest.param({"url": f"{REDIS}?namespace=team-a"}, "team-a", id="the URL"),
        pytest.param({"url": REDIS, "namespace": "team-b"}, "team-b", id="the spec"),
        pytest.param(
            {"url": f"{REDIS}?namespace=team-c", "namespace": "team-c"}, "team-c", id="both, equal"
        ),
        pytest.param({"url": f"{REDIS}?namespace=oma"}, "oma", id="the URL names the default"),
    ],
)
def test_the_redis_namespace_comes_from_the_spec_or_the_url(
    store: dict[str, Any], namespace: str
) -> None:
    opened = _redis(store)
    assert opened.namespace == namespace
    assert "namespace=" not in repr(opened).split(",")[0]  # taken out of the driver's URL
    assert "s3cret" not in repr(opened)


def test_the_redis_url_keeps_its_driver_options_and_comes_from_url_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_STORE_URL", f"{REDIS}?socket_timeout=7&namespace=from-env")
    opened = _redis({"urlEnv": "MY_STORE_URL"})
    assert opened.namespace == "from-env"
    kwargs = opened._client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 7.0 and "namespace" not in kwargs


@pytest.mark.parametrize(
    "store",
    [
        pytest.param({"url": f"{REDIS}?namespace=team-a", "namespace": "team-b"}, id="differ"),
        # Written out, the default is a value like any other: it does not yield to the URL.
        pytest.param({"url": f"{REDIS}?namespace=team-a", "namespace": "oma"}, id="explicit oma"),
    ],
)
def test_a_redis_namespace_in_the_spec_and_the_url_that_differ_is_refused(
    store: dict[str, Any],
) -> None:
    with pytest.raises(StoreConfigError) as refused:
        _redis(store)
    message = str(refused.value)
    assert "namespace='team-a'" in message and f"namespace={store['namespace']!r}" in message
    assert "run spec" in message and "one place" in message
    assert "\n" not in message and "s3cret" not in message
    assert refused.value.transient is False


@pytest.mark.parametrize(
    ("store", "table", "schema"),
    [
        pytest.param({"dsn": PG}, "oma_store", None, id="neither: the defaults"),
        pytest.param({"dsn": f"{PG}?table=runs_t&schema=runs"}, "runs_t", "runs", id="the URL"),
        pytest.param({"dsn": PG, "table": "t2", "schema": "s2"}, "t2", "s2", id="the spec"),
        pytest.param(
            {"dsn": f"{PG}?table=t3", "table": "t3", "schema": "s3"}, "t3", "s3", id="mixed"
        ),
        pytest.param(
            {"dsn": f"{PG}?sslmode=disable&table=t4", "schema": "s4"}, "t4", "s4", id="with libpq"
        ),
    ],
)
def test_the_postgres_table_and_schema_come_from_the_spec_or_the_url(
    store: dict[str, Any], table: str, schema: str | None
) -> None:
    opened = _postgres(store)
    assert (opened.table, opened.schema) == (table, schema)
    assert "table=" not in repr(opened).split(",")[0] and "s3cret" not in repr(opened)


@pytest.mark.parametrize(
    ("store", "option"),
    [
        pytest.param({"dsn": f"{PG}?table=a", "table": "b"}, "table", id="table"),
        pytest.param({"dsn": f"{PG}?table=a", "table": "oma_store"}, "table", id="explicit"),
        pytest.param({"dsn": f"{PG}?schema=a", "schema": "b"}, "schema", id="schema"),
    ],
)
def test_a_postgres_option_in_the_spec_and_the_url_that_differ_is_refused(
    store: dict[str, Any], option: str
) -> None:
    with pytest.raises(StoreConfigError) as refused:
        _postgres(store)
    message = str(refused.value)
    assert f"{option}='a'" in message and "run spec" in message and "s3cret" not in message


def test_url_options_hold_under_a_tenant_and_redaction() -> None:
    opened = _open({"redis": {"url": f"{REDIS}?namespace=team-a"}, "tenant": "t1"})
    assert isinstance(opened, PrefixedStore) and isinstance(opened.inner, RedisStore)
    assert opened.inner.namespace == "team-a"
    redacted = _open({"postgres": {"dsn": f"{PG}?table=t5"}, "redact": True})
    assert isinstance(redacted, RedactingStore) and isinstance(redacted.inner, PostgresStore)
    assert redacted.inner.table == "t5"


def test_a_spec_file_with_a_url_namespace_loads_and_opens() -> None:
    """The YAML a user writes: no namespace field, the namespace in the URL."""
    text = (
        "agents: [{name: w, model: {provider: scripted, script: [{text: done}]}}]\n"
        "tasks: [{title: T, description: d}]\n"
        f"store: {{redis: {{url: '{REDIS}?namespace=from-yaml'}}}}\n"
    )
    spec = load_run_spec(text, "spec.yaml")
    assert spec.store is not None
    opened = open_store(spec.store, Path("unused.json"))
    assert isinstance(opened, RedisStore) and opened.namespace == "from-yaml"


def test_oma_run_announces_where_the_namespace_and_table_come_from() -> None:
    """It said "namespace oma" for a URL that names another."""

    def said(store: dict[str, Any]) -> str:
        return describe_store(StoreSpec.model_validate(store), Path("unused.json"))

    assert said({"redis": {"url": f"{REDIS}?namespace=team-a"}}).endswith(
        "namespace from its ?namespace=, else oma"
    )
    assert said({"redis": {"url": REDIS, "namespace": "team-b"}}).endswith("namespace team-b")
    assert said({"postgres": {"dsn": PG, "schema": "s"}}).endswith(
        "table from its ?table=, else s.oma_store"
    )
    assert said({"postgres": {"dsn": PG, "table": "t"}}).endswith("table t")
