"""FANLINE_OUTBOX_ACK=applied, the embedded default (outbox.py): the relay
only marks published rows and replays them at start; the worker deletes a
row once its event is applied. Fakes for the peers: what matters here is
which internal call each side makes; tests/e2e/test_durable_embedded.py proves
delivery across restarts with the real processes."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from fanline_shared import events
from fanline_shared.domain import OutboxEvent
from fanline_shared.outbox import AppliedAcks, OutboxRelay
from fanline_shared.outbox.wire import event_to_json


class FakeOwner:
    """An owning service's internal outbox API over a dict."""

    def __init__(self, rows: list[OutboxEvent]) -> None:
        self.rows = {e.id: e for e in rows}
        self.published: set[uuid.UUID] = set()
        self.calls: list[str] = []

    async def call(self, method: str, path: str, *, operation: str, json: Any = None, params: Any = None, **_: Any) -> Any:
        self.calls.append(path)
        ids = [uuid.UUID(i) for i in (json or {}).get("ids", [])]
        if path == "/internal/outbox":
            items = [e for i, e in self.rows.items() if i not in self.published][: params["limit"]]
            return {"items": [event_to_json(e) for e in items]}
        if path == "/internal/outbox/ack":
            for i in ids:
                self.rows.pop(i, None)
            return None
        if path == "/internal/outbox/published":
            self.published.update(i for i in ids if i in self.rows)
            return None
        if path == "/internal/outbox/replay":
            n, self.published = len(self.published), set()
            return {"replayed": n}
        raise AssertionError(path)


class Broker:
    def __init__(self) -> None:
        self.sent: list[uuid.UUID] = []

    async def publish_many(self, batch: list[OutboxEvent]) -> list[OutboxEvent]:
        self.sent.extend(e.id for e in batch)
        return batch


def tweet_event() -> OutboxEvent:
    return events.tweet_created(uuid.uuid1(), "alice", datetime.now().astimezone())


async def test_broker_mode_deletes_rows_once_the_broker_has_them() -> None:
    rows = [tweet_event() for _ in range(3)]
    owner, broker = FakeOwner(rows), Broker()
    relay = OutboxRelay(broker, {"tweet-store": owner})  # type: ignore[arg-type]
    await relay.replay_once()
    assert await relay.sweep_once() == 3
    assert owner.rows == {}
    assert "/internal/outbox/replay" not in owner.calls


async def test_applied_mode_keeps_rows_until_applied_and_replays_them_at_start() -> None:
    rows = [tweet_event() for _ in range(3)]
    owner, broker = FakeOwner(rows), Broker()
    relay = OutboxRelay(broker, {"tweet-store": owner}, ack_when_applied=True)  # type: ignore[arg-type]
    await relay.replay_once()
    assert await relay.sweep_once() == 3
    assert len(owner.rows) == 3 and owner.published == set(owner.rows)  # kept, only marked
    assert await relay.sweep_once() == 0  # marked rows are not republished while this relay lives

    # The worker applies one event and acknowledges it to its owner.
    acks = AppliedAcks({"tweet-store": owner, "social-graph": FakeOwner([])})  # type: ignore[dict-item]
    acks.applied(events.decode(rows[0].payload))
    await acks.flush()
    assert set(owner.rows) == {rows[1].id, rows[2].id}

    # Everything stops (the in-memory broker forgets); a new relay replays
    # exactly the unapplied events.
    broker2 = Broker()
    relay2 = OutboxRelay(broker2, {"tweet-store": owner}, ack_when_applied=True)  # type: ignore[arg-type]
    await relay2.replay_once()
    assert await relay2.sweep_once() == 2
    assert broker2.sent == [rows[1].id, rows[2].id]
    await relay2.replay_once()  # once per start only
    assert owner.calls.count("/internal/outbox/replay") == 2  # relay, then relay2


async def test_fast_path_publish_is_marked_not_deleted_in_applied_mode() -> None:
    [row] = [tweet_event()]
    owner = FakeOwner([row])
    relay = OutboxRelay(Broker(), {"tweet-store": owner}, ack_when_applied=True)  # type: ignore[arg-type]
    relay.published("tweet-store", row.id)
    await relay.flush_acks()
    assert row.id in owner.rows and owner.published == {row.id}


async def test_an_ack_that_fails_is_kept_for_the_next_flush() -> None:
    from fanline_shared.errors import Unavailable

    class Down(FakeOwner):
        down = True

        async def call(self, method: str, path: str, **kw: Any) -> Any:
            if self.down:
                raise Unavailable("social-graph down")
            return await super().call(method, path, **kw)

    follow = events.followed("bob", "alice")
    social = Down([follow])
    acks = AppliedAcks({"tweet-store": FakeOwner([]), "social-graph": social})  # type: ignore[dict-item]
    acks.applied(events.decode(follow.payload))
    await acks.flush()
    assert follow.id in social.rows
    social.down = False
    await acks.flush()
    assert social.rows == {}
