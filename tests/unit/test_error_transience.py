"""Every oma error says whether it is transient, and docs/errors.md lists every code."""

from __future__ import annotations

import errno
import importlib
import pickle
import pkgutil
import re
import typing
from pathlib import Path
from types import ModuleType

import pytest

from oma import errors
from oma.approval.errors import ApprovalErrorCode, DurableApprovalError
from oma.errors import OmaError
from oma.llm.adapter import LLMError, LLMResponseError
from oma.pod_contract import Exit, exit_for_error
from oma.store import file as file_store

DOCS = Path(__file__).resolve().parents[2] / "docs" / "errors.md"

# The class-level default of each class oma.errors and oma.approval.errors define.
EXPECTED: dict[type[OmaError], bool] = {
    errors.OmaError: False,
    errors.StoreError: False,
    errors.StoreUnavailableError: True,
    errors.StoreConfigError: False,
    errors.StoreAuthError: False,
    errors.StoreCapabilityError: False,
    errors.StoreCorruptError: False,
    errors.CheckpointError: False,
    errors.CheckpointFencedError: False,
    errors.CheckpointLostError: False,
    errors.RunDrained: True,
    errors.CheckpointDecodeError: False,
    errors.CheckpointValidationError: False,
    errors.AttemptLogError: False,
    DurableApprovalError: False,
    LLMError: True,
    LLMResponseError: True,
}


def _every_error_class() -> list[type[OmaError]]:
    """Every ``OmaError`` subclass of the engine, the operator and the runner."""
    packages: list[ModuleType] = [importlib.import_module("oma")]
    for name in ("oma_operator", "oma_runner"):
        try:
            packages.append(importlib.import_module(name))
        except ImportError:  # pragma: no cover - the operator and runner are installed in dev
            continue
    for package in packages:
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not module.name.endswith("__main__"):
                importlib.import_module(module.name)
    found: list[type[OmaError]] = []
    pending: list[type[OmaError]] = [OmaError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return [cls for cls in found if not cls.__module__.startswith("tests")]


@pytest.mark.parametrize("cls", list(EXPECTED), ids=lambda cls: cls.__name__)
def test_each_error_class_declares_whether_it_is_transient(cls: type[OmaError]) -> None:
    assert cls.transient is EXPECTED[cls]


def test_the_exit_code_follows_the_flag() -> None:
    """``oma run`` and the runner end on an error by its flag: 1 (retried) or 2 (failed)."""
    assert exit_for_error(errors.StoreError("replica", transient=True)) is Exit.TRANSIENT
    assert exit_for_error(errors.StoreUnavailableError("down")) is Exit.TRANSIENT
    assert exit_for_error(LLMError("HTTP 401", transient=False)) is Exit.PERMANENT
    assert exit_for_error(errors.StoreConfigError("bad url")) is Exit.PERMANENT


def test_constructors_keep_the_class_default() -> None:
    assert errors.StoreUnavailableError("down").transient is True
    assert errors.StoreError("refused").transient is False
    assert errors.StoreCorruptError("/x.json", "not JSON").transient is False
    assert errors.CheckpointFencedError("k", 2).transient is False
    assert errors.CheckpointLostError("k", 2, "it saved before").transient is False
    assert errors.CheckpointDecodeError("k", "bad").transient is False
    assert errors.CheckpointValidationError("k", ["x: y"], {"2.6.1"}).transient is False
    assert errors.AttemptLogError("k", "bad").transient is False
    assert errors.RunDrained("stopped").transient is True
    assert DurableApprovalError("APPROVAL_CONFLICT", "decided").transient is False


def test_an_instance_may_say_otherwise_where_it_depends_on_the_cause() -> None:
    passing = errors.StoreError("replica refuses writes", transient=True)
    assert passing.transient is True and errors.StoreError.transient is False
    assert str(passing) == "replica refuses writes" and passing.args == ("replica refuses writes",)
    assert errors.StoreUnavailableError("closed", transient=False).transient is False
    config = errors.StoreConfigError("bad scheme")
    assert isinstance(config, ValueError) and config.transient is False
    # The flag survives pickling (multiprocessing, logging handlers that pickle records).
    assert pickle.loads(pickle.dumps(passing)).transient is True


def test_every_error_class_has_a_boolean_flag_and_a_documented_code() -> None:
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", DOCS.read_text(encoding="utf-8"), re.M))
    classes = _every_error_class()
    assert errors.StoreCapabilityError in classes and DurableApprovalError in classes
    for cls in classes:
        assert isinstance(cls.transient, bool), cls
        assert cls.code in documented, f"{cls.__module__}.{cls.__qualname__}: add {cls.code}"
    for code in typing.get_args(ApprovalErrorCode):
        assert code in documented, code


def test_the_documented_flag_is_the_class_default() -> None:
    rows = re.findall(
        r"^\| `([A-Z_]+)` \| `([\w.]+)` \| (yes|no)", DOCS.read_text(encoding="utf-8"), re.M
    )
    by_code = {cls.code: cls for cls in _every_error_class() if cls is not DurableApprovalError}
    assert len(rows) >= 30
    for code, name, flag in rows:
        cls = by_code[code]
        assert name.endswith(cls.__qualname__), (code, name)
        assert cls.transient is (flag == "yes"), code


@pytest.mark.parametrize(
    ("number", "transient"),
    [
        (errno.EAGAIN, True),
        (errno.EINTR, True),
        (errno.EBUSY, True),
        (errno.ENOLCK, True),
        (errno.EACCES, False),
        (errno.ENOSPC, False),
        (errno.ENOENT, False),
        (errno.EISDIR, False),
    ],
)
def test_file_store_errors_are_transient_only_for_passing_os_errors(
    number: int, transient: bool
) -> None:
    assert file_store._passing(OSError(number, "x")) is transient


@pytest.mark.parametrize(
    ("status", "transient"),
    [(0, True), (409, True), (429, True), (500, True), (503, True), (403, False), (404, False)],
)
def test_a_kubernetes_api_error_is_transient_by_its_status(status: int, transient: bool) -> None:
    from oma_operator.k8s.errors import KubeError

    assert KubeError(status, "x").transient is transient
