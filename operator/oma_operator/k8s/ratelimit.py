"""The operator's client-side rate limit on API requests: a token bucket (``qps`` a second,
up to ``burst`` at once), as client-go's ``QPS`` and ``Burst``.

It protects the API server from the operator in a burst (thousands of TeamRuns created at
once), and it bounds what one operator can do: at ``qps`` requests a second and R requests per
run, at most ``60 * qps / R`` runs a minute (docs/operations.md, "Sizing and timeouts").
Requests over the limit wait here, in the order they came, rather than fail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class RateLimit:
    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs qps > 0 and burst >= 1 (got {qps}, {burst})")
        self.qps, self.burst = qps, burst
        self._clock, self._sleep = clock, sleep
        self._tokens = float(burst)
        self._at = clock()
        self.waited = 0.0  # seconds requests spent waiting here, in all (for the metrics)

    def _delay(self) -> float:
        """Take a token, and how long its request must wait for it (0: none)."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
        self._at = now
        self._tokens -= 1.0  # reserved now: later callers queue behind (tokens go negative)
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    async def acquire(self) -> None:
        delay = self._delay()
        if delay > 0:
            self.waited += delay
            await self._sleep(delay)
