"""One relay per outbox (issue 14, 3(e)): with N gateway replicas, N relays
sweeping after an outage published N copies of every waiting event. Only
the lease holder sweeps now; a standby takes over when the lease lapses or
is released. Fakes for the owner's internal API (its lease semantics are
the port's, proven on SQLite and Cassandra by tests/contract/test_relay_lease.py);
tests/e2e/test_relay_leader.py counts the messages with two real gateways."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.testclient import TestClient

from fanline_shared import events, metrics
from fanline_shared.domain import OutboxEvent, new_timeuuid, utcnow
from fanline_shared.errors import NotFound
from fanline_shared.http_routes import EXCEPTION_HANDLERS
from fanline_shared.outbox import OutboxRelay, outbox_routes
from fanline_shared.outbox.wire import event_to_json


class Owner:
    """An owning service's outbox API over a dict, with the lease's semantics."""

    def __init__(self, rows: list[OutboxEvent], *, leases: bool = True) -> None:
        self.rows = {e.id: e for e in rows}
        self.leases = leases
        self.lease: tuple[str, float] | None = None  # holder, expiry (monotonic)

    async def call(self, method: str, path: str, *, operation: str, json: Any = None, params: Any = None, **_: Any) -> Any:
        await asyncio.sleep(0)  # let the other relay interleave, as over HTTP
        if path == "/internal/outbox":
            return {"items": [event_to_json(e) for e in list(self.rows.values())[: params["limit"]]]}
        if path == "/internal/outbox/ack":
            for i in json["ids"]:
                self.rows.pop(uuid.UUID(i), None)
            return None
        if path == "/internal/outbox/lease":
            if not self.leases:
                raise NotFound("no route /internal/outbox/lease")  # an owner older than leases
            now = time.monotonic()
            if method == "DELETE":
                if self.lease and self.lease[0] == params["holder"]:
                    self.lease = None
                return None
            if self.lease is None or self.lease[1] <= now or self.lease[0] == json["holder"]:
                self.lease = (json["holder"], now + json["ttl_s"])
                return {"held": True}
            return {"held": False}
        raise AssertionError(path)


class Broker:
    def __init__(self) -> None:
        self.sent: list[uuid.UUID] = []

    async def publish_many(self, batch: list[OutboxEvent]) -> list[OutboxEvent]:
        await asyncio.sleep(0)
        self.sent.extend(e.id for e in batch)
        return batch


def waiting(n: int) -> list[OutboxEvent]:
    """Events written a minute ago (an outage), never published."""
    return [events.tweet_created(uuid.uuid1(), "ada", utcnow()) for _ in range(n)]


async def sweep(relay: OutboxRelay) -> int:
    await relay.keep_leases()
    return await relay.sweep_once()


async def test_two_relays_publish_each_waiting_event_once() -> None:
    owner = Owner(waiting(7))
    broker = Broker()
    relays = [
        OutboxRelay(broker, {"tweet-store": owner}, stale_after_ms=0, lease_ttl_s=10)  # type: ignore[arg-type]
        for _ in range(2)
    ]
    await asyncio.gather(*(sweep(r) for r in relays))
    await asyncio.gather(*(sweep(r) for r in relays))
    assert len(broker.sent) == len(set(broker.sent)) == 7
    assert [r.leads("tweet-store") for r in relays].count(True) == 1


async def test_without_leases_both_relays_publish_everything() -> None:
    """The defect, kept visible: what two replicas did before (no lease)."""
    owner = Owner(waiting(7))
    broker = Broker()
    relays = [OutboxRelay(broker, {"tweet-store": owner}, stale_after_ms=0) for _ in range(2)]  # type: ignore[arg-type]
    await asyncio.gather(*(r.sweep_once() for r in relays))
    assert len(broker.sent) == 14


async def test_a_standby_takes_over_when_the_holder_stops_or_dies() -> None:
    owner = Owner([])
    broker = Broker()
    first, second = (
        OutboxRelay(broker, {"tweet-store": owner}, stale_after_ms=0, lease_ttl_s=2)  # type: ignore[arg-type]
        for _ in range(2)
    )
    await first.keep_leases()
    await second.keep_leases()
    assert first.leads("tweet-store") and not second.leads("tweet-store")
    assert metrics.OUTBOX_RELAY_ACTIVE.labels("tweet-store")._value.get() == 0  # the last to ask: standby

    owner.rows = {e.id: e for e in waiting(3)}
    await first.stop()  # releases the lease
    assert owner.lease is None and not first.leads("tweet-store")
    await asyncio.sleep(2 / 3 + 0.05)  # the standby's next turn
    assert await sweep(second) == 3 and second.leads("tweet-store")

    # The holder dies (no release): the lease lapses after its TTL.
    third = OutboxRelay(broker, {"tweet-store": owner}, stale_after_ms=0, lease_ttl_s=2)  # type: ignore[arg-type]
    await third.keep_leases()
    assert not third.leads("tweet-store")
    second._lease_next["tweet-store"] = float("inf")  # second is gone
    await asyncio.sleep(2.05)
    third._lease_next["tweet-store"] = 0.0
    await third.keep_leases()
    assert third.leads("tweet-store")


async def test_a_holder_stops_sweeping_before_its_lease_can_lapse() -> None:
    owner = Owner(waiting(2))
    relay = OutboxRelay(Broker(), {"tweet-store": owner}, stale_after_ms=0, lease_ttl_s=2)  # type: ignore[arg-type]
    await relay.keep_leases()
    expiry = owner.lease[1]  # type: ignore[index]
    assert relay._lease_until["tweet-store"] <= expiry - 2 * 0.2 + 0.01  # stops at 80 % of the TTL


async def test_an_owner_without_leases_leaves_every_relay_active() -> None:
    """A rolling upgrade: an owner that predates leases answers 404."""
    owner = Owner(waiting(2), leases=False)
    relay = OutboxRelay(Broker(), {"tweet-store": owner}, stale_after_ms=0, lease_ttl_s=10)  # type: ignore[arg-type]
    assert await sweep(relay) == 2


async def test_the_active_relay_exports_the_age_of_the_oldest_waiting_event() -> None:
    old = OutboxEvent(id=new_timeuuid(utcnow() - timedelta(seconds=90)), key="k", payload=b"{}")

    class Down(Broker):
        async def publish_many(self, batch: list[OutboxEvent]) -> list[OutboxEvent]:
            return []  # the broker is down: the event keeps waiting

    relay = OutboxRelay(Down(), {"social-graph": Owner([old])}, stale_after_ms=0, lease_ttl_s=10)  # type: ignore[arg-type]
    await sweep(relay)
    age = metrics.OUTBOX_OLDEST_AGE.labels("social-graph")._value.get()
    assert 89 <= age <= 120


def test_the_lease_route_refuses_bad_input_with_400() -> None:
    class Leases:
        def __init__(self) -> None:
            self.calls: list[tuple[str, Any]] = []

        async def acquire_lease(self, holder: str, ttl_s: int) -> bool:
            self.calls.append((holder, ttl_s))
            return True

        async def release_lease(self, holder: str) -> None:
            self.calls.append((holder, None))

    leases = Leases()
    app = Starlette(
        routes=outbox_routes("test", lambda _request: leases),  # type: ignore[arg-type, return-value]
        exception_handlers=EXCEPTION_HANDLERS,
    )
    client = TestClient(app)
    for body in (
        {"holder": "a"},
        {"holder": "a", "ttl_s": 0},
        {"holder": "a", "ttl_s": 3601},
        {"holder": "a", "ttl_s": 1.5},
        {"holder": "a", "ttl_s": True},
        {"holder": "", "ttl_s": 5},
        {"holder": 7, "ttl_s": 5},
        {"holder": "x" * 201, "ttl_s": 5},
        {"holder": "a\nb", "ttl_s": 5},
    ):
        response = client.post("/internal/outbox/lease", json=body)
        assert response.status_code == 400, (body, response.text)
    assert client.post("/internal/outbox/lease", content=b"[").status_code == 400
    assert client.delete("/internal/outbox/lease").status_code == 400
    assert leases.calls == []
    response = client.post("/internal/outbox/lease", json={"holder": "gw:1:ab", "ttl_s": 10})
    assert response.status_code == 200 and response.json() == {"held": True}
    assert client.delete("/internal/outbox/lease", params={"holder": "gw:1:ab"}).status_code == 204
    assert leases.calls == [("gw:1:ab", 10), ("gw:1:ab", None)]


async def test_the_active_gauge_drops_when_the_lease_ends_unrenewed() -> None:
    """A holder stuck in a slow publish (Kafka down) must not keep reporting itself active."""
    relay = OutboxRelay(Broker(), {"social-graph": Owner([])}, stale_after_ms=0, lease_ttl_s=2)  # type: ignore[arg-type]
    await relay.keep_leases()
    assert metrics.OUTBOX_RELAY_ACTIVE.labels("social-graph")._value.get() == 1
    await asyncio.sleep(2 * 0.8 + 0.1)  # no renewal meanwhile
    assert metrics.OUTBOX_RELAY_ACTIVE.labels("social-graph")._value.get() == 0
