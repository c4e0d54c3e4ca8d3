"""The API's error answers as classes by status (``oma_operator.k8s.errors``), each still a
``KubeError`` with its status and whether trying again may help."""

from __future__ import annotations

import pytest

from oma_operator.k8s.errors import (
    CHANGED_OR_GONE,
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeGone,
    KubeInvalid,
    KubeNotFound,
    KubeServerError,
    KubeTooManyRequests,
    KubeUnauthorized,
    KubeUnreachable,
    kube_error,
)


@pytest.mark.parametrize(
    ("status", "kind", "transient"),
    [
        (0, KubeUnreachable, True),
        (400, KubeError, False),
        (401, KubeUnauthorized, False),
        (403, KubeForbidden, False),
        (404, KubeNotFound, False),
        (409, KubeConflict, True),
        (410, KubeGone, False),
        (422, KubeInvalid, False),
        (429, KubeTooManyRequests, True),
        (500, KubeServerError, True),
        (503, KubeServerError, True),
    ],
)
def test_each_status_has_its_class(status: int, kind: type[KubeError], transient: bool) -> None:
    error = kube_error(status, "the API's message")
    assert type(error) is kind and isinstance(error, KubeError)
    assert error.status == status and error.transient is transient
    assert error.code == "KUBE_API"
    assert str(error) == f"Kubernetes API answered {status}: the API's message"


def test_changed_or_gone_is_what_a_later_round_sees_again() -> None:
    for status in (404, 409):
        with pytest.raises(CHANGED_OR_GONE):
            raise kube_error(status, "m")
    for status in (0, 403, 422, 500):  # a refusal or a failure is not one of them
        assert not isinstance(kube_error(status, "m"), CHANGED_OR_GONE), status
