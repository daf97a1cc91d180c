"""Admission control: past its capacity a service sheds, it never queues for minutes.

An open-loop crowd does not wait for answers before sending more. A service
that takes every request it is sent then holds more and more of them at
once, each slower than the last, until clients wait minutes — and every
request in that queue is served too late to matter. Here a service works on
at most ``AdmissionPolicy.max_in_flight`` requests at once; a request that
finds them all taken waits at most ``queue_deadline_s`` for one (first come,
first served, at most ``max_queue`` waiting), and otherwise is answered at
once with ``503 unavailable`` + ``Retry-After`` (api.md's error body) before
any of its work is done — so a refusal is as fast as the deadline, the
requests that are accepted keep the latency of a service at capacity, and
a well-behaved client knows when to come back.

``AdmissionMiddleware`` (ASGI) applies a ``Gate`` to one service. Not
counted: the policy's exempt routes (health, readiness, metrics; the
gateway's live streams, which stay open for hours and have their own
per-user cap) and requests a peer marks as background work
(``http_client.PRIORITY_HEADER``: the fan-out worker's writes have their own
adaptive limit) -- the mark counts only on a request that also carries the
service credential (``internal_auth``), so nobody outside can skip the
queue by sending it (the gateway, which has no credential to check, never
honours it and drops every ``X-Fanline-*`` header at its edge). A refusal
carries ``X-Fanline-Overloaded: <service>`` so a
calling service knows the peer shed it (``errors.Overloaded``) and does not
retry it inside a user's request.

Why hand-written and not ``asyncio.Semaphore``: the gate must know how many
wait (to refuse at once past ``max_queue``, and for the metrics) and must
never leak a slot when a waiter's deadline and a release race; the whole
queue is a deque of futures, 40 lines.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from . import metrics
from .errors import OVERLOADED_HEADER, Overloaded
from .http_client import BACKGROUND, BULK, PRIORITY_HEADER
from .http_routes import error_body, json_response
from .internal_auth import HEADER as INTERNAL_TOKEN_HEADER
from .policies import AdmissionPolicy

log = logging.getLogger(__name__)
T = TypeVar("T")
_PRIORITY = PRIORITY_HEADER.encode()
_BACKGROUND = (BACKGROUND.encode(), BULK.encode())  # a large fan-out's slices are background work too
_TOKEN = INTERNAL_TOKEN_HEADER.encode()


class LatencyLimit:
    """The gate's limit when ``policy.latency_tolerance`` > 0: additive
    increase, multiplicative decrease on the latency of what was admitted
    (``AdmissionPolicy`` says how; the fan-out's ``AdaptiveLimit`` in
    tweet-store does the same for background writes). ``value`` is the
    number of requests that may be in flight now; the gauge
    ``fanline_admission_limit`` shows it."""

    def __init__(self, policy: AdmissionPolicy, service: str, clock: Callable[[], float]) -> None:
        self._p = policy
        self._clock = clock
        self.value = float(policy.max_in_flight)
        self._floor = float(min(policy.min_in_flight, policy.max_in_flight))
        self._samples: list[float] = []
        self._peak = 0  # most requests in flight at once in this window
        self._min_now = float("inf")
        self._min_prev = float("inf")
        self._window_start = clock()
        self._gauge = metrics.ADMISSION_LIMIT.labels(service)
        self._gauge.set(self.value)

    @property
    def baseline(self) -> float:
        return min(self._min_now, self._min_prev)

    def admitted(self, in_flight: int) -> None:
        """A request was let in; ``in_flight`` now, with it."""
        self._peak = max(self._peak, in_flight)

    def observe(self, latency_s: float) -> None:
        """One admitted request's time in the service."""
        self._samples.append(latency_s)
        if len(self._samples) < self._p.adapt_samples:
            return
        samples = sorted(self._samples)
        q = samples[min(len(samples) - 1, int(self._p.latency_quantile * len(samples)))]
        self._samples.clear()
        now = self._clock()
        if now - self._window_start >= self._p.baseline_window_s:
            self._min_prev, self._min_now, self._window_start = self._min_now, float("inf"), now
        self._min_now = min(self._min_now, q)
        if q <= self._p.latency_tolerance * self.baseline + self._p.latency_slack_s:
            self.value = min(float(self._p.max_in_flight), self.value + 1)
        elif self._peak >= self.value / 2 and self._peak * (1 - self.baseline / q) >= self._p.queue_floor:
            # Slow while the gate was busy, and (Vegas' estimate) at least
            # ``queue_floor`` of the requests in flight were waiting behind
            # each other: a queue of our making. Slow with few in flight is a
            # slow dependency or cores taken by background work, which fewer
            # slots won't fix: without the second test a limit of 8 shrank on
            # 4 in flight, spiralled to the floor at 5 posts/s + 100 reads/s
            # while the fan-out ran, and refused posts at ~3 % of capacity.
            self.value = max(self._floor, self.value * self._p.backoff)
        self._peak = 0
        self._gauge.set(self.value)


class Gate:
    """At most ``policy.max_in_flight`` holders at once; a caller that finds
    them taken waits, in arrival order, at most ``policy.queue_deadline_s``.

    ``enter()`` returns how long it waited, or raises ``Overloaded`` (with
    ``reason`` ``queue_full``, ``deadline``, or ``overloaded`` — refused at
    once within ``policy.fast_refusal_s`` of a refusal at the deadline);
    every successful ``enter()`` is paired with one ``leave()``."""

    def __init__(self, policy: AdmissionPolicy, clock: Callable[[], float] = time.perf_counter, service: str = "") -> None:
        self.policy = policy
        self._clock = clock
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._last_deadline_refusal = float("-inf")
        self.adaptive = LatencyLimit(policy, service or policy.name, clock) if policy.latency_tolerance > 0 else None
        if self.adaptive is None:
            metrics.ADMISSION_LIMIT.labels(service or policy.name).set(policy.max_in_flight)

    @property
    def limit(self) -> int:
        """Requests that may be in flight now."""
        return int(self.adaptive.value) if self.adaptive is not None else self.policy.max_in_flight

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def enter(self) -> float:
        if self._in_flight < self.limit and not self._waiters:
            self._in_flight += 1
            if self.adaptive is not None:
                self.adaptive.admitted(self._in_flight)
            return 0.0
        if len(self._waiters) >= self.policy.max_queue or self.policy.queue_deadline_s <= 0:
            raise _overloaded(self.policy, "queue_full")
        started = self._clock()
        if started - self._last_deadline_refusal < self.policy.fast_refusal_s:
            raise _overloaded(self.policy, "overloaded")  # sustained overload: no point waiting
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(slot)
        try:
            async with asyncio.timeout(self.policy.queue_deadline_s):
                await slot
        except TimeoutError:
            if not (slot.done() and not slot.cancelled()):
                self._last_deadline_refusal = self._clock()
                raise _overloaded(self.policy, "deadline") from None
            # leave() handed us the slot just as the deadline passed: keep it.
        except BaseException:
            # Cancelled while waiting (the client went away): a slot handed
            # over in the meantime goes to the next waiter.
            if slot.done() and not slot.cancelled():
                self.leave()
            raise
        finally:
            if not slot.done():
                slot.cancel()
            try:
                self._waiters.remove(slot)
            except ValueError:
                pass  # leave() already took it off the queue
        if self.adaptive is not None:
            self.adaptive.admitted(self._in_flight)
        return self._clock() - started

    def leave(self, latency_s: float | None = None) -> None:
        """Give the slot to the first live waiter, or free it; ``latency_s``,
        the request's time in the service, teaches the adaptive limit (None:
        not a sample). A limit that shrank is met by freeing slots, not
        handing them over, until fewer than the limit are in flight."""
        if latency_s is not None and self.adaptive is not None:
            self.adaptive.observe(latency_s)
        if self._in_flight <= self.limit:
            while self._waiters:
                slot = self._waiters.popleft()
                if not slot.done():
                    slot.set_result(None)  # the slot changes hands; in_flight stays
                    return
        self._in_flight -= 1


def _overloaded(policy: AdmissionPolicy, reason: str) -> Overloaded:
    error = Overloaded("the service is over its capacity; retry later", retry_after=policy.retry_after_s)
    error.reason = reason  # type: ignore[attr-defined]
    return error


def route_template(scope: Scope) -> str:
    """The path template of the route this request would reach (bounded
    metric labels), or ``unmatched``. Only computed for refused requests."""
    app = scope.get("app")
    for candidate in getattr(app, "routes", ()):
        match, _ = candidate.matches(scope)
        if match != Match.NONE:
            return str(getattr(candidate, "path", "unmatched"))
    return "unmatched"


class Admission:
    """One service's admission: its ``Gate``, what is exempt from it (see the
    module docstring) and its metrics. ``AdmissionMiddleware`` applies it to
    the requests that reach the service's ASGI app; ``http_local`` applies
    the same object to the in-process calls that skip that app's chain.
    ``internal_token``: the service credential (``FANLINE_INTERNAL_TOKEN``);
    only a request carrying it may mark itself as background work. None (the
    gateway): no request may."""

    def __init__(self, policy: AdmissionPolicy, service: str, internal_token: str | None = None) -> None:
        self.policy = policy
        self.service = service
        self._token = internal_token.encode() if internal_token else None
        self.gate = Gate(policy, service=service)
        self._unsampled = set(policy.unsampled)
        # Exported at 0 from the start, so the dashboard shows a flat line
        # rather than nothing while no request was ever refused.
        self._in_flight = metrics.ADMISSION_IN_FLIGHT.labels(service)
        self._waiting = metrics.ADMISSION_WAITING.labels(service)
        self._wait_admitted = metrics.ADMISSION_QUEUE_WAIT.labels(service, "admitted")
        self._wait_shed = metrics.ADMISSION_QUEUE_WAIT.labels(service, "shed")
        self._in_flight.set(0)
        self._waiting.set(0)
        if not policy.enabled:
            log.info("%s: admission control off (%s max_in_flight 0)", service, policy.name)

    def exempt(self, scope: Scope) -> bool:
        path: str = scope.get("path", "")
        if path in self.policy.exempt_paths or path.startswith(self.policy.exempt_prefixes):
            return True
        if self._token is None:
            return False
        background = authenticated = False
        for name, value in scope.get("headers", ()):
            if name == _PRIORITY:
                background = value in _BACKGROUND
            elif name == _TOKEN:
                authenticated = hmac.compare_digest(value, self._token)
        return background and authenticated

    def counts(self, scope: Scope) -> bool:
        """Whether this request passes through the gate at all."""
        return scope["type"] == "http" and self.policy.enabled and not self.exempt(scope)

    async def enter(self, scope: Scope) -> Response | None:
        """Wait for a slot: None once admitted (pair it with ``leave``), else
        the refusal to answer with, counted and timed."""
        started = time.perf_counter()
        self._waiting.inc()
        try:
            waited = await self.gate.enter()
        except Overloaded as exc:
            self._waiting.dec()
            return self._refusal(scope, exc, time.perf_counter() - started)
        except BaseException:
            self._waiting.dec()
            raise
        self._waiting.dec()
        self._wait_admitted.observe(waited)
        self._in_flight.inc()
        return None

    async def around(self, scope: Scope, call: Callable[[], Awaitable[T]], refused: Callable[[Response], Awaitable[T]]) -> T:
        """``call()`` through the gate: at once when the request does not count
        (``counts``), else once admitted, its slot freed after it (``leave``);
        ``refused(response)`` instead when it is shed."""
        if not self.counts(scope):
            return await call()
        refusal = await self.enter(scope)
        if refusal is not None:
            return await refused(refusal)
        admitted, failed = time.perf_counter(), True
        try:
            result = await call()
            failed = False
        finally:
            self.leave(scope, admitted, failed)
        return result

    def leave(self, scope: Scope, admitted_at: float, failed: bool) -> None:
        """The admitted request is done; ``admitted_at``: ``perf_counter()``
        when ``enter`` let it in (its latency teaches the adaptive limit,
        unless it failed or its route is unsampled)."""
        self._in_flight.dec()
        sample = not failed and (scope.get("method", ""), scope.get("path", "")) not in self._unsampled
        self.gate.leave(time.perf_counter() - admitted_at if sample else None)

    def _refusal(self, scope: Scope, exc: Overloaded, waited: float) -> Response:
        reason = str(getattr(exc, "reason", "deadline"))
        template = route_template(scope)
        self._wait_shed.observe(waited)
        metrics.ADMISSION_SHED.labels(self.service, template, reason).inc()
        # Counted with the other answers too, so request rates and the 5xx
        # ratio include what was refused.
        metrics.HTTP_REQUESTS.labels(self.service, scope.get("method", ""), template, "503").inc()
        return json_response(
            error_body("unavailable", exc.message),
            503,
            {"Retry-After": str(exc.retry_after), OVERLOADED_HEADER: self.service},
        )


class AdmissionMiddleware:
    """ASGI middleware: the service's requests pass through one ``Admission``
    (``admission``, or one made of ``policy``, ``service`` and
    ``internal_token``)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        policy: AdmissionPolicy | None = None,
        service: str = "",
        internal_token: str | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.app = app
        if admission is None:
            if policy is None:
                raise TypeError("AdmissionMiddleware needs an admission or a policy")
            admission = Admission(policy, service, internal_token)
        self.admission = admission

    @property
    def gate(self) -> Gate:
        return self.admission.gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def refused(response: Response) -> None:
            await response(scope, receive, send)

        await self.admission.around(scope, lambda: self.app(scope, receive, send), refused)
