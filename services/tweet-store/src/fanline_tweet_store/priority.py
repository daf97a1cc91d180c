"""Fan-out yields to user-facing requests (``policies.FanoutYield``).

tweet-store serves two kinds of callers: the gateway, on behalf of a person
waiting for an answer (posts, timelines, lookups), and the fan-out worker,
writing home-timeline rows in the background. On a busy Cassandra node every
statement queues behind the ones already in flight, so fan-out writes in
flight turn straight into post and read latency. This module tracks when a
user-facing request was last served; the adaptive fan-out limit
(``limiter.py``) tolerates less queueing while it is.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Iterator

from starlette.requests import Request
from starlette.responses import Response

from fanline_shared.http_client import BACKGROUND, BULK, PRIORITY_HEADER
from fanline_shared.policies import FanoutYield

Handler = Callable[[Request], Awaitable[Response]]


class ForegroundActivity:
    """When this process last served a user-facing request."""

    def __init__(self, policy: FanoutYield, clock: Callable[[], float] = time.monotonic) -> None:
        self._policy = policy
        self._clock = clock
        self._last = float("-inf")
        self._active = 0

    def touch(self) -> None:
        self._last = self._clock()

    def busy(self) -> bool:
        return self._active > 0 or self._clock() - self._last < self._policy.quiet_s

    def foreground(self, handler: Handler) -> Handler:
        """Wrap a user-facing route handler: the fan-out yields while it runs
        and for ``quiet_s`` after — unless the caller marked the request as
        background work (``http_client.PRIORITY_HEADER``, sent by the worker)."""

        @functools.wraps(handler)
        async def wrapped(request: Request) -> Response:
            if request.headers.get(PRIORITY_HEADER) in (BACKGROUND, BULK):
                return await handler(request)  # the worker's own calls
            with self.serving():
                return await handler(request)

        return wrapped

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """A user-facing request served in this block: the fan-out yields
        while it runs and for ``quiet_s`` after."""
        self._active += 1
        self.touch()
        try:
            yield
        finally:
            self._active -= 1
            self.touch()
