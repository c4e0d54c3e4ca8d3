"""The Kubernetes API's error answers as classes by status, as kopf has them: a caller catches
what it means (``KubeConflict``: the object changed since it was read; ``KubeNotFound``: it is
gone) instead of comparing numbers. Each is a ``KubeError`` with its ``status``."""

from __future__ import annotations

from oma.errors import OmaError


class KubeError(OmaError):
    """An API call failed: ``status`` is the HTTP status, 0 when the server was not reached.
    Transient for 0, 409 (a conflict: read again and retry), 429 and 5xx."""

    code = "KUBE_API"

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(
            f"Kubernetes API answered {status}: {message}",
            transient=status in (0, 409, 429) or status >= 500,
        )


class KubeUnreachable(KubeError):
    """The API server could not be reached (status 0): no answer, a refused connection."""


class KubeUnauthorized(KubeError):
    """401: the credentials were not accepted."""


class KubeForbidden(KubeError):
    """403: RBAC or an admission policy refused the request."""


class KubeNotFound(KubeError):
    """404: the object (or a key in it) does not exist, or no longer does."""


class KubeConflict(KubeError):
    """409: the object changed since it was read (or already exists): read it again."""


class KubeGone(KubeError):
    """410: a watch or list continued from a version the server no longer keeps."""


class KubeInvalid(KubeError):
    """422: the object was refused by validation (the CRD's schema or rules)."""


class KubeTooManyRequests(KubeError):
    """429: the API server asks to slow down."""


class KubeServerError(KubeError):
    """5xx: the API server failed; retrying later may succeed."""


_BY_STATUS: dict[int, type[KubeError]] = {
    0: KubeUnreachable,
    401: KubeUnauthorized,
    403: KubeForbidden,
    404: KubeNotFound,
    409: KubeConflict,
    410: KubeGone,
    422: KubeInvalid,
    429: KubeTooManyRequests,
}

# The object changed or went away since it was read: the next event or round acts on it.
CHANGED_OR_GONE = (KubeNotFound, KubeConflict)


def kube_error(status: int, message: str) -> KubeError:
    """The error class for ``status`` (``KubeError`` itself for any other)."""
    kind = _BY_STATUS.get(status) or (KubeServerError if status >= 500 else KubeError)
    return kind(status, message)
