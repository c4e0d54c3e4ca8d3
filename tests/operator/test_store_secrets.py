"""A TeamRun's store Secret is a secret whatever its key holds (issue 41, attack 6): a key
holding a bare password put it verbatim in the TeamRun's status message, three conditions, two
Events and the operator log, because the URL parse error quoted it.

The store cache reads the Secret through a stand-in for the Kubernetes API (it answers the one
call the cache makes, decoding the Secret's data as the real client does); the stores are real
Redis and PostgreSQL servers.
"""

from __future__ import annotations

import base64
import logging
import traceback
from collections.abc import Iterator
from typing import Any, cast

import pytest

from oma.errors import StoreAuthError, StoreConfigError, StoreUnavailableError
from oma.store.base import MemoryStore
from oma_operator import masking, runtime
from oma_operator.k8s.client import Kube
from oma_operator.k8s.errors import KubeError
from oma_operator.resources.bodies import TeamRunBody
from oma_operator.resources.models import TeamRunSpec
from oma_operator.runs import trouble
from oma_operator.runs.rules import status
from oma_operator.stores import StoreCache
from tests.servers.postgres_server import PostgresServer
from tests.servers.process import free_port
from tests.servers.redis_server import RedisServer

SECRET = "hunter2-S3cret!"
NAMESPACE = "team-a"
TEAMRUN: TeamRunBody = {
    "metadata": {"name": "pay", "namespace": NAMESPACE, "uid": "uid-1", "generation": 1}
}


def pieces(secret: str, size: int = 6) -> list[str]:
    """Every run of ``size`` characters of ``secret``: none may show."""
    return [secret[i : i + size] for i in range(max(1, len(secret) - size + 1))]


def assert_hidden(text: str, *secrets: str) -> None:
    for secret in secrets:
        for piece in pieces(secret):
            assert piece not in text, f"{piece!r} of a secret shows in: {text}"


def shown(error: BaseException) -> str:
    return "\n".join([str(error), repr(error), *traceback.format_exception(error)])


class SecretsApi:
    """The Kubernetes API as the store cache and ``trouble`` use it: Secrets (data base64, as
    the API server returns it, decoded as ``Kube.secret_value`` decodes it), and the TeamRun
    status and Events they write, recorded."""

    def __init__(self, secrets: dict[tuple[str, str], bytes]) -> None:
        self.data = {k: base64.b64encode(v).decode() for k, v in secrets.items()}
        self.events: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        assert namespace == NAMESPACE
        data = self.data.get((name, key))
        if data is None:
            raise KubeError(404, f"secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data).decode()

    async def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.events.append(body)
        return body

    async def get_teamrun(self, namespace: str, name: str) -> TeamRunBody:
        return {**TEAMRUN, "status": {}}

    async def patch_teamrun_status(
        self, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        self.statuses.append(patch)
        return patch


def spec(kind: str, name: str = "store", key: str = "url", **extra: str) -> TeamRunSpec:
    ref = {"name": name, "key": key}
    store = (
        {"redis": {"urlSecretRef": ref, **extra}}
        if kind == "redis"
        else {"postgres": {"dsnSecretRef": ref, **extra}}
    )
    return TeamRunSpec.model_validate(
        {
            "team": {"agents": [{"name": "a", "model": {"provider": "scripted", "script": []}}]},
            "tasks": [{"title": "t", "description": "d"}],
            "store": store,
        }
    )


@pytest.fixture(autouse=True)
def _fresh_masking(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(masking, "SECRETS", masking.SecretValues())
    factory = logging.getLogRecordFactory()
    yield
    logging.setLogRecordFactory(factory)


async def opened(api: SecretsApi, teamrun_spec: TeamRunSpec) -> tuple[StoreCache, MemoryStore]:
    cache = StoreCache()
    return cache, await cache.store_of(cast(Kube, api), NAMESPACE, teamrun_spec)


@pytest.mark.parametrize("kind", ["redis", "postgres"])
@pytest.mark.parametrize("value", [SECRET, f"{SECRET}\n", "hunter2:S3cret!"])
async def test_a_bare_password_is_refused_naming_the_secret_and_showing_none_of_it(
    kind: str,
    value: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = SecretsApi({("store", "url"): value.encode()})
    monkeypatch.setattr(runtime, "_kube", api)
    masking.install_log_masking()
    cache = StoreCache()
    with pytest.raises(StoreConfigError) as caught:
        await cache.store_of(cast(Kube, api), NAMESPACE, spec(kind))
    error = caught.value
    assert str(error).startswith(f"the store URL in Secret {NAMESPACE}/store key url is not a URL")
    assert error.transient is False
    assert_hidden(shown(error), SECRET, "S3cret!")
    # What the operator makes of it: the Reconciled condition, an Event, its log.
    with caplog.at_level(logging.WARNING):
        await trouble.report(TEAMRUN, "reading the run's approvals", error)
        logging.getLogger("oma_operator.test").exception("failed", exc_info=error)
    assert api.events and api.statuses
    assert "Secret team-a/store key url" in api.events[0]["message"]
    assert_hidden(repr(api.events) + repr(api.statuses) + caplog.text, SECRET, "S3cret!")
    await cache.close()
    trouble._reported.clear()


@pytest.mark.parametrize(
    ("kind", "value", "scheme"),
    [
        ("redis", "file:///tmp/x", "file"),
        ("redis", "memory://", "memory"),
        ("postgres", "file:///tmp/x", "file"),
        ("postgres", "memory://", "memory"),
        ("redis", f"postgresql://u:{SECRET}@db/x", "postgresql"),
        ("postgres", f"redis://:{SECRET}@db:6379/0", "redis"),
    ],
)
async def test_only_a_server_url_of_the_store_s_kind_is_opened(
    kind: str, value: str, scheme: str
) -> None:
    api = SecretsApi({("store", "url"): value.encode()})
    with pytest.raises(StoreConfigError) as caught:
        await opened(api, spec(kind))
    message = str(caught.value)
    assert message.startswith(f"the store URL in Secret {NAMESPACE}/store key url ")
    assert f"has scheme {scheme!r}, which a TeamRun's {kind} store may not use" in message
    assert_hidden(shown(caught.value), SECRET, "/tmp/x")


async def test_a_value_that_is_not_text_is_refused_showing_none_of_it() -> None:
    api = SecretsApi({("store", "url"): b"\xffhunter2-S3cret!"})
    with pytest.raises(StoreConfigError, match="Secret team-a/store key url is not UTF-8") as e:
        await opened(api, spec("redis"))
    assert_hidden(shown(e.value), SECRET)
    assert "xff" not in shown(e.value)


async def test_a_conflicting_namespace_in_the_url_is_refused_showing_none_of_it() -> None:
    api = SecretsApi(
        {("store", "url"): f"redis://:{SECRET}@db:6379/0?namespace=qv7-x-Zm3".encode()}
    )
    with pytest.raises(StoreConfigError, match=r"sets \?namespace=") as caught:
        await opened(api, spec("redis", namespace="other-ns"))
    assert_hidden(shown(caught.value), SECRET, "qv7-x-Zm3")


async def test_a_redis_secret_works_and_its_errors_show_no_password(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    closed = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"
    api = SecretsApi(
        {("store", "url"): redis_server.url.encode(), ("down", "url"): closed.encode()}
    )
    monkeypatch.setattr(runtime, "_kube", api)
    cache, store = await opened(api, spec("redis", namespace="secrets-ok"))
    try:
        await store.set("k", "v")
        entry = await store.get("k")
        assert entry is not None and entry.value == "v"
        await store.delete("k")
        assert_hidden(repr(store), redis_server.password)
        down = await cache.store_of(cast(Kube, api), NAMESPACE, spec("redis", name="down"))
        with pytest.raises(StoreUnavailableError) as caught:
            await down.get("k")
    finally:
        await cache.close()
    assert_hidden(shown(caught.value), SECRET)
    with caplog.at_level(logging.WARNING):
        await trouble.report(TEAMRUN, "reading the run's approvals", caught.value)
    assert_hidden(repr(api.events) + repr(api.statuses) + caplog.text, SECRET)
    trouble._reported.clear()


async def test_a_postgres_secret_s_errors_show_neither_password_nor_ssl_password(
    postgres_server: PostgresServer,
) -> None:
    wrong = postgres_server.dsn(password=SECRET) + "?sslmode=disable&sslpassword=Zq9-ssl-Kx7wv"
    api = SecretsApi(
        {("store", "url"): postgres_server.dsn().encode(), ("wrong", "url"): wrong.encode()}
    )
    cache, store = await opened(api, spec("postgres", table="secrets_ok"))
    try:
        await store.set("k", "v")
        entry = await store.get("k")
        assert entry is not None and entry.value == "v"
        await store.delete("k")
        bad = await cache.store_of(cast(Kube, api), NAMESPACE, spec("postgres", name="wrong"))
        with pytest.raises(StoreAuthError) as caught:
            await bad.get("k")
    finally:
        await cache.close()
    assert_hidden(shown(caught.value) + repr(bad), SECRET, "Zq9-ssl-Kx7wv")


async def test_a_value_read_from_a_secret_is_masked_wherever_it_is_quoted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The belt: a message that quotes the value anyway (a driver's, a runner's termination
    message) has it masked in conditions, Events, the Reconciled report and the log."""
    url = f"redis://:{SECRET}@db.invalid:6379/0?ssl_password=Zq9-ssl-Kx7wv"
    api = SecretsApi({("store", "url"): url.encode()})
    monkeypatch.setattr(runtime, "_kube", api)
    masking.install_log_masking()
    cache, _ = await opened(api, spec("redis"))
    await cache.close()
    quoting = RuntimeError(f"a driver echoed {url!r}, and {SECRET} and Zq9-ssl-Kx7wv alone")
    try:
        raise ValueError("wrapped") from quoting
    except ValueError as chained:
        with caplog.at_level(logging.WARNING):
            logging.getLogger("oma_operator.test").exception("saw %s", url)
            await trouble.report(TEAMRUN, "reading progress", quoting)
        wrapped = chained
    condition = status.condition("Failed", True, "Error", f"runner said: {SECRET}", 1)
    everything = repr(api.events) + repr(api.statuses) + caplog.text + repr(condition)
    assert "Traceback" in caplog.text and "wrapped" in caplog.text  # still logged, masked
    assert_hidden(everything, SECRET, "Zq9-ssl-Kx7wv")
    assert wrapped.__cause__ is quoting
    trouble._reported.clear()


def test_short_or_unrelated_text_is_left_alone() -> None:
    masking.remember("redis://:pw@db:6379/0")  # "pw": too short to look for in free text
    assert masking.mask("the pw field; db is up") == "the pw field; db is up"
    assert masking.mask("redis://:pw@db:6379/0 failed") == "*** failed"
