"""The gateway's request deadline (``policies.RequestDeadline``).

Every public route runs under a deadline. When it passes, the work still in
flight (a peer call waiting on a stalled Cassandra, its retries) is
cancelled and the client gets ``503 unavailable`` with ``Retry-After``: a
load balancer or client can tell a stalled Fanline from a slow one, and
nothing hangs. A write the owner already stored when the deadline passed is
not lost: its event is in the owner's outbox, and a client retrying with the
same ``Idempotency-Key`` gets that tweet back.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import Response

from fanline_shared.errors import Unavailable
from fanline_shared.http_routes import Handler
from fanline_shared.policies import RequestDeadline

log = logging.getLogger(__name__)


def bounded(handler: Handler, deadline: RequestDeadline) -> Handler:
    """``handler`` under ``deadline``; past it, ``Unavailable`` (503 +
    Retry-After via the route's error mapping)."""

    async def run(request: Request) -> Response:
        timer = asyncio.timeout(deadline.seconds)
        try:
            async with timer:
                return await handler(request)
        except TimeoutError:
            if not timer.expired():
                raise  # someone else's timeout, not our deadline
            log.warning(
                "%s %s: no answer within %.3g s (%s), answering 503",
                request.method,
                request.url.path,
                deadline.seconds,
                deadline.name,
            )
            raise Unavailable(
                f"no answer within {deadline.seconds:g} s: a dependency is slow or unavailable; retry later",
                retry_after=deadline.retry_after_s,
            ) from None

    return run
