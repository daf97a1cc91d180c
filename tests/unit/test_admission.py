"""Admission control (shared/admission.py, issue #18 item 4): past its
capacity a service refuses at once with 503 + Retry-After instead of
queueing; what it admits keeps its pace.

The ``Gate`` is driven with real asyncio tasks (no fake clock: the deadlines
are tens of milliseconds); the middleware through a real Starlette app with
an httpx ASGI transport, many requests at once."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from prometheus_client import REGISTRY
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fanline_shared.admission import AdmissionMiddleware, Gate
from fanline_shared.config import ConfigError, Env, admission_policy
from fanline_shared.errors import OVERLOADED_HEADER, Overloaded
from fanline_shared.http_client import BACKGROUND, BULK, PRIORITY_HEADER
from fanline_shared.policies import GATEWAY_ADMISSION, PEER_REQUEST, AdmissionPolicy, RetryPolicy, retry


def policy(**kw: object) -> AdmissionPolicy:
    base: dict[str, object] = {"name": "test", "max_in_flight": 2, "queue_deadline_s": 0.05, "max_queue": 2}
    base.update(kw)
    return AdmissionPolicy(**base)  # type: ignore[arg-type]


# --- the gate -------------------------------------------------------------------


async def test_admits_up_to_the_limit_without_waiting() -> None:
    gate = Gate(policy())
    assert await gate.enter() == 0.0
    assert await gate.enter() == 0.0
    assert gate.in_flight == 2 and gate.waiting == 0


async def test_a_waiter_that_gets_no_slot_within_the_deadline_is_refused_at_the_deadline() -> None:
    gate = Gate(policy(queue_deadline_s=0.05))
    await gate.enter()
    await gate.enter()
    started = time.perf_counter()
    with pytest.raises(Overloaded) as refused:
        await gate.enter()
    elapsed = time.perf_counter() - started
    assert 0.04 <= elapsed < 0.1
    assert refused.value.reason == "deadline"  # type: ignore[attr-defined]
    assert refused.value.retry_after == 1
    assert gate.in_flight == 2 and gate.waiting == 0  # nothing leaked


async def test_after_a_refusal_at_the_deadline_a_full_gate_refuses_at_once_for_a_while() -> None:
    now = [0.0]
    gate = Gate(policy(max_in_flight=1, max_queue=10, queue_deadline_s=0.02, fast_refusal_s=1.0), clock=lambda: now[0])
    await gate.enter()
    with pytest.raises(Overloaded) as first:
        await gate.enter()  # waits its 20 ms, then refused
    assert first.value.reason == "deadline"  # type: ignore[attr-defined]
    now[0] = 0.5
    started = time.perf_counter()
    with pytest.raises(Overloaded) as second:
        await gate.enter()
    assert time.perf_counter() - started < 0.01
    assert second.value.reason == "overloaded"  # type: ignore[attr-defined]
    now[0] = 1.5  # the overload is a second old: a burst may queue again
    waiter = asyncio.create_task(gate.enter())
    await asyncio.sleep(0)
    assert gate.waiting == 1
    gate.leave()
    await waiter
    # A free slot is always taken, overload or not.
    gate.leave()
    now[0] = 1.6
    gate._last_deadline_refusal = 1.6
    assert await gate.enter() == 0.0


async def test_past_the_queue_bound_a_request_is_refused_without_waiting() -> None:
    gate = Gate(policy(max_in_flight=1, max_queue=1, queue_deadline_s=1.0))
    await gate.enter()
    waiter = asyncio.create_task(gate.enter())
    await asyncio.sleep(0)
    assert gate.waiting == 1
    started = time.perf_counter()
    with pytest.raises(Overloaded) as refused:
        await gate.enter()
    assert time.perf_counter() - started < 0.01
    assert refused.value.reason == "queue_full"  # type: ignore[attr-defined]
    gate.leave()
    assert await waiter >= 0.0
    assert gate.in_flight == 1


async def test_a_released_slot_goes_to_the_first_waiter_in_arrival_order() -> None:
    gate = Gate(policy(max_in_flight=1, max_queue=10, queue_deadline_s=1.0))
    await gate.enter()
    order: list[int] = []

    async def wait(i: int) -> None:
        await gate.enter()
        order.append(i)

    tasks = [asyncio.create_task(wait(i)) for i in range(3)]
    await asyncio.sleep(0)
    for _ in range(3):
        gate.leave()
        await asyncio.sleep(0.001)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]
    gate.leave()
    assert gate.in_flight == 0


async def test_a_cancelled_waiter_frees_its_place_and_never_a_slot() -> None:
    gate = Gate(policy(max_in_flight=1, max_queue=10, queue_deadline_s=1.0))
    await gate.enter()
    first = asyncio.create_task(gate.enter())
    second = asyncio.create_task(gate.enter())
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    assert gate.waiting == 1
    gate.leave()  # goes to the second, not to the cancelled first
    await second
    assert gate.in_flight == 1
    gate.leave()
    assert gate.in_flight == 0 and gate.waiting == 0


async def test_a_slot_handed_to_a_waiter_that_is_then_cancelled_passes_on() -> None:
    gate = Gate(policy(max_in_flight=1, max_queue=10, queue_deadline_s=1.0))
    await gate.enter()
    first = asyncio.create_task(gate.enter())
    second = asyncio.create_task(gate.enter())
    await asyncio.sleep(0)
    gate.leave()  # the slot is the first waiter's now ...
    first.cancel()  # ... but it goes away before it runs
    await asyncio.gather(first, return_exceptions=True)
    await asyncio.wait_for(second, 1)  # so the second has it
    assert gate.in_flight == 1
    gate.leave()
    assert gate.in_flight == 0


async def test_many_at_once_never_more_than_the_limit_in_flight() -> None:
    gate = Gate(policy(max_in_flight=3, max_queue=100, queue_deadline_s=0.03))
    peak = 0
    outcomes = {"served": 0, "shed": 0}

    async def request() -> None:
        nonlocal peak
        try:
            await gate.enter()
        except Overloaded:
            outcomes["shed"] += 1
            return
        try:
            peak = max(peak, gate.in_flight)
            await asyncio.sleep(0.01)
            outcomes["served"] += 1
        finally:
            gate.leave()

    await asyncio.gather(*(request() for _ in range(60)))
    assert peak == 3
    assert outcomes["served"] + outcomes["shed"] == 60
    assert outcomes["served"] >= 6 and outcomes["shed"] > 0
    assert gate.in_flight == 0 and gate.waiting == 0


# --- the adaptive limit (LatencyLimit) ---------------------------------------------


def adaptive(**kw: object) -> AdmissionPolicy:
    return policy(
        **{
            "max_in_flight": 40,
            "max_queue": 100,
            "latency_tolerance": 2.0,
            "latency_slack_s": 0.0,
            "adapt_samples": 4,
            "min_in_flight": 4,
            **kw,
        }
    )


def teach(gate: Gate, latency_s: float, windows: int = 1, *, busy: bool = True) -> None:
    """``windows`` windows of samples of ``latency_s``; ``busy``: the limit
    was all in flight during each (else one request at a time)."""
    assert gate.adaptive is not None
    for _ in range(windows):
        gate.adaptive.admitted(gate.limit if busy else 1)
        for _ in range(gate.policy.adapt_samples):
            gate.adaptive.observe(latency_s)


def test_the_limit_shrinks_when_latency_rises_past_its_baseline_and_regrows_when_it_falls() -> None:
    gate = Gate(adaptive(), service="unit-adaptive-a")
    assert gate.limit == 40
    teach(gate, 0.010, 3)  # the baseline: 10 ms; at the ceiling already
    assert gate.limit == 40
    teach(gate, 0.019)  # within 2 x the baseline: no change
    assert gate.limit == 40
    teach(gate, 0.050)  # a queue: x0.9
    assert gate.limit == 36
    teach(gate, 0.050, 40)
    assert gate.limit == 4  # never below the floor (nor below a queue of 4: Vegas)
    assert 4 <= sample("fanline_admission_limit", {"service": "unit-adaptive-a"}) < 5
    teach(gate, 0.012, 3)  # fast again: +1 a window
    assert gate.limit == 7
    teach(gate, 0.012, 100)
    assert gate.limit == 40  # never above max_in_flight


def test_a_slow_dependency_with_few_requests_in_flight_does_not_shrink_the_limit() -> None:
    gate = Gate(adaptive())
    teach(gate, 0.010, 2)
    teach(gate, 0.500, 10, busy=False)  # Cassandra stalls; one request at a time
    assert gate.limit == 40
    teach(gate, 0.500, 1)  # the same with the gate full: our queue
    assert gate.limit == 36


def test_a_ceiling_under_the_floor_is_the_floor() -> None:
    gate = Gate(adaptive(max_in_flight=2))
    teach(gate, 0.010)
    teach(gate, 0.100, 5)
    assert gate.limit == 2


def test_the_baseline_forgets_after_two_windows_so_a_slower_deployment_is_not_starved() -> None:
    now = [0.0]
    gate = Gate(adaptive(baseline_window_s=10.0), clock=lambda: now[0])
    teach(gate, 0.010)
    now[0] = 11.0  # the 10 ms window is now the previous one
    teach(gate, 0.030)  # shrinks: 3 x the 10 ms still remembered
    assert gate.limit == 36
    now[0] = 22.0  # 10 ms forgotten: 30 ms is the latency without a queue now
    teach(gate, 0.030, 5)
    assert gate.limit == 40


async def test_a_shrunk_limit_holds_new_requests_out_until_enough_have_left() -> None:
    gate = Gate(adaptive(max_in_flight=6, queue_deadline_s=0.05, adapt_samples=1, min_in_flight=2, backoff=0.5))
    for _ in range(6):
        await gate.enter()
    gate.leave(0.01)  # the baseline, 5 in flight
    assert gate.adaptive is not None
    gate.adaptive.admitted(gate.in_flight)  # (each leave is a window here: 5 in flight during this one)
    gate.leave(0.10)  # slow while busy: the limit halves to 3, 4 in flight
    assert gate.limit == 3 and gate.in_flight == 4
    waiter = asyncio.create_task(gate.enter())
    await asyncio.sleep(0)
    gate.leave(None)  # 4 > 3 in flight: the slot is freed, not handed over
    assert gate.in_flight == 3 and not waiter.done()
    gate.leave(None)  # now under the limit: handed to the waiter
    await waiter
    assert gate.in_flight == 3


async def test_the_middleware_teaches_the_limit_with_what_it_admits_but_not_password_routes() -> None:
    hold = asyncio.Event()
    hold.set()
    p = adaptive(adapt_samples=2, unsampled=(("GET", "/v1/slow/argon2"),))
    app = app_with(p, "unit-adaptive-mw", hold)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        for _ in range(3):
            assert (await client.get("/v1/slow/argon2")).status_code == 200
        gate = next(m for m in _middlewares(app) if isinstance(m, AdmissionMiddleware)).gate
        assert gate.adaptive is not None
        assert gate.adaptive.baseline == float("inf")  # nothing learned from a password route
        for _ in range(2):
            assert (await client.get("/v1/slow/u")).status_code == 200
        assert gate.adaptive.baseline < 0.5


def _middlewares(app: Starlette) -> list[object]:
    """The middleware stack serving requests (built on the first), outermost first."""
    out = []
    layer: object = app.middleware_stack
    while layer is not None:
        out.append(layer)
        layer = getattr(layer, "app", None)
    return out


# --- the middleware -------------------------------------------------------------


def sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


TOKEN = "unit-test-service-credential"


def app_with(p: AdmissionPolicy, service: str, hold: asyncio.Event, internal_token: str | None = None) -> Starlette:
    async def slow(_: Request) -> Response:
        await hold.wait()
        return Response("ok")

    async def healthz(_: Request) -> Response:
        return Response("alive")

    app = Starlette(routes=[Route("/v1/slow/{name}", slow), Route("/healthz", healthz), Route("/v1/streaming/home", slow)])
    app.add_middleware(AdmissionMiddleware, policy=p, service=service, internal_token=internal_token)
    return app


async def test_the_middleware_refuses_past_capacity_with_the_api_error_body_fast() -> None:
    hold = asyncio.Event()
    service = "unit-admission-a"
    app = app_with(
        policy(max_in_flight=2, max_queue=2, queue_deadline_s=0.05, exempt_prefixes=("/v1/streaming/",)), service, hold
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        held = [asyncio.create_task(client.get(f"/v1/slow/u{i}")) for i in range(2)]
        await asyncio.sleep(0.01)
        started = time.perf_counter()
        refused = await asyncio.gather(*(client.get(f"/v1/slow/x{i}") for i in range(5)))
        elapsed = time.perf_counter() - started
        # Exempt while full: health, and a stream (not counted at all).
        assert (await client.get("/healthz")).status_code == 200
        stream = asyncio.create_task(client.get("/v1/streaming/home"))
        await asyncio.sleep(0.01)
        # Admitted, not refused (a full gate in its fast-refusal second would
        # have answered it at once).
        assert not stream.done()
        # A public request that marks itself as background work is counted
        # like any other: a service without a credential to check (the
        # gateway) never honours the mark.
        marked = await asyncio.gather(
            client.get("/v1/slow/bg", headers={PRIORITY_HEADER: BACKGROUND}),
            client.get("/v1/slow/bulk", headers={PRIORITY_HEADER: BULK}),
        )
        assert [r.status_code for r in marked] == [503, 503]
        hold.set()
        assert [r.status_code for r in await asyncio.gather(*held, stream)] == [200] * 3
    assert elapsed < 0.1
    for r in refused:
        assert r.status_code == 503
        assert r.json() == {"error": {"code": "unavailable", "message": "the service is over its capacity; retry later"}}
        assert r.headers["retry-after"] == "1"
        assert r.headers[OVERLOADED_HEADER.lower()] == service
    labels = {"service": service, "route": "/v1/slow/{name}"}
    shed = sum(sample("fanline_admission_shed_total", {**labels, "reason": reason}) for reason in ("deadline", "queue_full"))
    assert shed == 5
    # The two marked as background work, at once: within a second of a refusal at the deadline.
    assert sample("fanline_admission_shed_total", {**labels, "reason": "overloaded"}) == 2
    assert sample("fanline_admission_shed_total", {**labels, "reason": "queue_full"}) == 3  # 2 waited, 3 could not
    assert sample("fanline_http_requests_total", {**labels, "method": "GET", "status": "503"}) == 7
    assert sample("fanline_admission_in_flight", {"service": service}) == 0
    assert sample("fanline_admission_queue_wait_seconds_count", {"service": service, "outcome": "shed"}) == 7


async def test_only_a_caller_with_the_service_credential_may_mark_background_work() -> None:
    """A storage service (which has the credential) does not count the fan-out
    worker's background requests; the same mark without the credential, or
    with a wrong one, is counted and shed like any other request."""
    hold = asyncio.Event()
    app = app_with(policy(max_in_flight=1, max_queue=0, queue_deadline_s=0.0), "unit-admission-token", hold, TOKEN)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        held = asyncio.create_task(client.get("/v1/slow/held"))
        await asyncio.sleep(0.01)
        trusted = [
            asyncio.create_task(client.get(f"/v1/slow/{v}", headers={PRIORITY_HEADER: v, "x-fanline-internal-token": TOKEN}))
            for v in (BACKGROUND, BULK)
        ]
        untrusted = await asyncio.gather(
            client.get("/v1/slow/a", headers={PRIORITY_HEADER: BACKGROUND}),
            client.get("/v1/slow/b", headers={PRIORITY_HEADER: BACKGROUND, "x-fanline-internal-token": "not-the-credential"}),
            client.get("/v1/slow/c", headers={PRIORITY_HEADER: "urgent", "x-fanline-internal-token": TOKEN}),
        )
        assert [r.status_code for r in untrusted] == [503, 503, 503]
        await asyncio.sleep(0.01)
        assert not any(t.done() for t in trusted), "background work with the credential is not counted, so not refused"
        hold.set()
        assert [r.status_code for r in await asyncio.gather(held, *trusted)] == [200] * 3


async def test_off_when_max_in_flight_is_zero() -> None:
    hold = asyncio.Event()
    app = app_with(policy(max_in_flight=0), "unit-admission-off", hold)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        pending = [asyncio.create_task(client.get(f"/v1/slow/u{i}")) for i in range(20)]
        await asyncio.sleep(0.02)
        hold.set()
        assert {r.status_code for r in await asyncio.gather(*pending)} == {200}


# --- settings and peers -----------------------------------------------------------


def test_settings_override_the_named_policy_and_refuse_nonsense() -> None:
    p = admission_policy(
        Env(
            {
                "FANLINE_ADMISSION_MAX_IN_FLIGHT": "3",
                "FANLINE_ADMISSION_QUEUE_DEADLINE_S": "0.02",
                "FANLINE_ADMISSION_MAX_QUEUE": "7",
                "FANLINE_ADMISSION_RETRY_AFTER_S": "2",
                "FANLINE_ADMISSION_FAST_REFUSAL_S": "0",
            }
        ),
        GATEWAY_ADMISSION,
    )
    assert (p.max_in_flight, p.queue_deadline_s, p.max_queue, p.retry_after_s, p.fast_refusal_s) == (3, 0.02, 7, 2, 0)
    assert p.exempt_prefixes == GATEWAY_ADMISSION.exempt_prefixes
    assert admission_policy(Env({}), GATEWAY_ADMISSION) == GATEWAY_ADMISSION
    assert admission_policy(Env({"FANLINE_ADMISSION_LATENCY_TOLERANCE": "0"}), GATEWAY_ADMISSION).latency_tolerance == 0
    assert GATEWAY_ADMISSION.latency_tolerance >= 1  # the edge adapts by default
    for bad in (
        {"FANLINE_ADMISSION_MAX_IN_FLIGHT": "-1"},
        {"FANLINE_ADMISSION_QUEUE_DEADLINE_S": "soon"},
        {"FANLINE_ADMISSION_RETRY_AFTER_S": "0"},
        {"FANLINE_ADMISSION_LATENCY_TOLERANCE": "0.5"},
    ):
        with pytest.raises(ConfigError):
            admission_policy(Env(bad), GATEWAY_ADMISSION)


async def test_a_request_path_does_not_retry_a_peer_that_shed_it_but_background_work_does() -> None:
    calls = 0

    async def shed() -> None:
        nonlocal calls
        calls += 1
        raise Overloaded("peer over capacity")

    with pytest.raises(Overloaded):
        await retry(PEER_REQUEST, shed)
    assert calls == 1
    calls = 0
    with pytest.raises(Overloaded):
        await retry(RetryPolicy("bg", attempts=3, base_delay_s=0.001, max_delay_s=0.001), shed)
    assert calls == 3


def test_a_slower_service_with_a_few_in_flight_is_not_a_queue_to_shrink() -> None:
    """The cores are taken by background work (the fan-out): every request is
    3 x slower, with a handful in flight. Only ~2.7 of 4 were queued behind
    each other (Vegas: 4 x (1 - 1/3)): no reason to refuse the next burst —
    this spiral once held the gateway at its floor of 4 and refused posts at
    5 a second."""
    gate = Gate(adaptive(max_in_flight=8))
    teach(gate, 0.010, 2)
    for _ in range(20):
        gate.adaptive.admitted(4)  # type: ignore[union-attr]
        for _ in range(gate.policy.adapt_samples):
            gate.adaptive.observe(0.030)  # type: ignore[union-attr]
    assert gate.limit == 8
    teach(gate, 0.030, 1)  # all 8 in flight and 3 x slower: ~5 queued, shrink
    assert gate.limit == 7


async def test_the_gateway_drops_every_internal_header_from_public_requests() -> None:
    """``X-Fanline-*`` headers are the internal protocol's; the gateway's
    outermost middleware removes them before anything reads them."""
    from fanline_api.edge import StripInternalHeaders

    seen: list[dict[str, str]] = []

    async def echo(request: Request) -> Response:
        seen.append(dict(request.headers))
        return Response("ok")

    app = StripInternalHeaders(Starlette(routes=[Route("/v1/x", echo)]))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        r = await client.get(
            "/v1/x",
            headers={
                PRIORITY_HEADER: BACKGROUND,
                "X-Fanline-Internal-Token": "x" * 32,
                "X-Fanline-Timeout-Ms": "1",
                "X-Fanline-Anything-New": "1",
                "X-Request-Id": "kept-0123456789",
                "Authorization": "Bearer kept",
            },
        )
    assert r.status_code == 200
    (headers,) = seen
    assert not [name for name in headers if name.startswith("x-fanline-")], headers
    assert headers["x-request-id"] == "kept-0123456789" and headers["authorization"] == "Bearer kept"
