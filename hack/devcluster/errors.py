"""Errors raised by devcluster, each with a message that says what to do."""


class DevClusterError(RuntimeError):
    """Base class of every devcluster error."""


class MissingBinaryError(DevClusterError):
    """A Kubernetes binary is not in the cache."""


class PortInUseError(DevClusterError):
    """A loopback port asked for is already taken."""


class StartupError(DevClusterError):
    """A child process exited or did not become ready in time."""
