"""Node-loss machinery for the three-node cluster tests (``test_cluster.py``).

* ``Load``: steady traffic through the public API from threads — posters
  (``POST /v1/tweets`` with an ``Idempotency-Key``, retried with the same key
  after an error, as a client should) and readers (home and public
  timelines) — with a ledger of every acknowledged tweet.
* ``verify``: after the fault, every acknowledged tweet is in its author's
  userline exactly once and in every follower's home timeline exactly once
  (fan-out consumed it once in effect); counts what was lost or duplicated.
* ``Survived`` rows: one per fault, printed in the pytest terminal summary
  (``tests/e2e/conftest.py``) and written to
  ``test-artifacts/reliability-cluster.md`` for ``docs/reliability.md``.
* Kafka helpers: the events topic's partition leaders, the active KRaft
  controller (from the brokers' own logs), the consumer group's lag.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .client import Api, eventually

REPO = Path(__file__).resolve().parents[2]
ARTIFACT = REPO / "test-artifacts" / "reliability-cluster.md"

#: Filled by the tests, printed by ``pytest_terminal_summary``.
SURVIVED: list[Survived] = []


@dataclass
class Survived:
    fault: str
    duration_s: float
    sent: int
    failed: int
    retried: int
    acked: int
    lost: int
    duplicated: int
    note: str = ""


HEADER = (
    "| fault | duration | requests sent | failed | retried | acknowledged writes | lost | duplicated | notes |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---|"
)


def table(rows: list[Survived]) -> str:
    lines = [HEADER]
    for r in rows:
        lines.append(
            f"| {r.fault} | {r.duration_s:.0f} s | {r.sent} | {r.failed} | {r.retried} | {r.acked} | "
            f"{r.lost} | {r.duplicated} | {r.note} |"
        )
    return "\n".join(lines)


def record(row: Survived) -> None:
    SURVIVED.append(row)
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text(table(SURVIVED) + "\n")


@dataclass
class Load:
    """Posters and readers hammering the API until :meth:`stop`.

    An *operation* (one tweet, one timeline read) is retried after an error
    (5xx, transport error) for up to ``op_deadline_s``: ``retried`` counts
    the attempts that errored, ``failed`` the operations that never
    succeeded. A tweet is *acknowledged* once a 200/201 returned its id.
    ``deadline_refusals`` counts the retried attempts a live gateway
    refused at its own request deadline (``503``, "no answer within"): a
    dependency slower than the deadline, not a gateway going away.
    """

    api_url: str
    posters: list[tuple[str, str]]  # (username, token)
    readers: list[tuple[str, str]]
    # Several gateways behind a load balancer: each attempt goes to the next
    # URL this returns (round robin), as a balancer sends requests only to
    # the replicas in its pool. None: always ``api_url``.
    gateways: Callable[[], list[str]] | None = None
    post_interval_s: float = 0.25
    read_interval_s: float = 0.5
    op_deadline_s: float = 60.0
    sent: int = 0
    retried: int = 0
    deadline_refusals: int = 0
    failed: int = 0
    acked: dict[str, tuple[str, str]] = field(default_factory=dict)  # body -> (author, tweet id)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Load:
        for name, token in self.posters:
            self._threads.append(threading.Thread(target=self._poster, args=(name, token), daemon=True))
        for name, token in self.readers:
            self._threads.append(threading.Thread(target=self._reader, args=(name, token), daemon=True))
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.op_deadline_s + 30)

    def _attempt(self, client: httpx.Client, method: str, path: str, **kw: Any) -> httpx.Response | None:
        """One operation with retries; the successful response, or None."""
        deadline = time.monotonic() + self.op_deadline_s
        while True:
            with self._lock:
                self.sent += 1
                url = path
                if self.gateways is not None:
                    pool = self.gateways()
                    url = pool[self.sent % len(pool)] + path
            sent_at = time.monotonic()
            deadline_refusal = False
            try:
                r = client.request(method, url, **kw)
                if r.status_code < 500 and r.status_code != 429:
                    return r
                reason = f"{r.status_code} {r.text[:120]}"
                deadline_refusal = r.status_code == 503 and "no answer within" in r.text
            except httpx.HTTPError as exc:
                reason = repr(exc)[:160]
            with self._lock:
                self.retried += 1
                self.deadline_refusals += deadline_refusal
                if len(self.errors) < 50:
                    where = f" via {url.removesuffix(path)}" if self.gateways is not None else ""
                    took = time.monotonic() - sent_at
                    self.errors.append(f"{time.strftime('%H:%M:%S')} {method} {path}{where} after {took:.1f} s: {reason}")
            if time.monotonic() > deadline:
                with self._lock:
                    self.failed += 1
                return None
            time.sleep(0.5)

    def _poster(self, name: str, token: str) -> None:
        with httpx.Client(base_url=self.api_url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as c:
            while not self._stop.is_set():
                key = uuid.uuid4().hex
                body = f"load {key}"
                r = self._attempt(c, "POST", "/v1/tweets", json={"body": body}, headers={"Idempotency-Key": key})
                if r is not None:
                    if r.status_code in (200, 201):
                        with self._lock:
                            self.acked[body] = (name, r.json()["id"])
                    else:
                        with self._lock:
                            self.failed += 1
                            self.errors.append(f"POST /v1/tweets: {r.status_code} {r.text[:120]}")
                self._stop.wait(self.post_interval_s)

    def _reader(self, name: str, token: str) -> None:
        with httpx.Client(base_url=self.api_url, timeout=30, headers={"Authorization": f"Bearer {token}"}) as c:
            while not self._stop.is_set():
                for path in ("/v1/timeline", "/v1/public"):
                    r = self._attempt(c, "GET", path, params={"limit": 20})
                    if r is not None and r.status_code != 200:
                        with self._lock:
                            self.failed += 1
                            self.errors.append(f"GET {path}: {r.status_code} {r.text[:120]}")
                self._stop.wait(self.read_interval_s)


def setup_users(api: Api, posters: int = 3, readers: int = 2) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Fresh posters and readers; every reader follows every poster."""
    ps = [api.user("p") for _ in range(posters)]
    rs = [api.user("r") for _ in range(readers)]
    for rname, rtoken in rs:
        for pname, _ in ps:
            api.follow(rtoken, rname, pname)
    return ps, rs


def _bodies(items: list[dict[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for t in items:
        out.setdefault(t["body"], []).append(t["id"])
    return out


def _brief(line: str) -> str:
    """A JSON log line's telling fields (where the event was, what happened)."""
    try:
        record = json.loads(line)
    except ValueError:
        return line[:300]
    keys = ("timestamp", "event", "partition", "offset", "first", "last", "reason", "error", "rows", "followers")
    return " ".join(f"{k}={record[k]}" for k in keys if k in record)


def explain(log_dir: Path | None, tweet_ids: list[str], limit: int = 3) -> None:
    """Print what the services logged about the first ``limit`` of
    ``tweet_ids`` (the worker's lines carry each event's partition and
    offset), or that nothing did: a lost tweet then says where it went."""
    if log_dir is None or not log_dir.is_dir():
        return
    logs = {p.stem: p.read_text(errors="replace").splitlines() for p in sorted(log_dir.glob("*.log"))}
    # The fan-out worker's notes on offsets it did not commit or saw skipped.
    notes = [f"    {name}: {_brief(line)}" for name, text in logs.items() for line in text if '"offsets.' in line]
    print(f"  offsets.* lines in the services' logs: {len(notes)}")
    print("\n".join(notes[:10]))
    for tid in tweet_ids[:limit]:
        lines = [f"    {name}: {_brief(line)}" for name, text in logs.items() for line in text if tid in line]
        print(f"  {tid} in the services' logs: {len(lines)} line(s)")
        print("\n".join(lines[:8]))


def verify(api: Api, load: Load, timeout: float = 120.0, log_dir: Path | None = None) -> tuple[int, int]:
    """``(lost, duplicated)`` among the acknowledged tweets, once fan-out has
    caught up (every reader's home timeline holds every acknowledged tweet, or
    ``timeout`` passed).

    Lost: an acknowledged tweet missing from its author's userline, a
    follower's home timeline or (a sample of 100) ``GET /v1/tweets/{id}``. Duplicated: a body (one
    per Idempotency-Key) stored as more than one tweet, or a tweet listed
    twice in a timeline.
    """
    acked = dict(load.acked)
    want = {tid for _, tid in acked.values()}

    def homes() -> dict[str, list[dict[str, Any]]]:
        return {name: api.all_items("/v1/timeline", token) for name, token in load.readers}

    def caught_up() -> bool:
        return all(want <= {t["id"] for t in items} for items in homes().values())

    try:
        eventually(caught_up, timeout=timeout, interval=2.0, what="fan-out caught up")
    except AssertionError:
        pass  # counted as lost below
    lost: set[str] = set()
    duplicated = 0
    # Where each lost tweet is missing (printed when any is): a userline, the
    # single read, or which readers' home timelines; a failed run says where
    # to look (the gateway's write, or fan-out) without its logs.
    missing: dict[str, list[str]] = {}
    for author, _ in load.posters:
        by_body = _bodies(api.all_items(f"/v1/users/{author}/tweets"))
        for body, (a, tid) in acked.items():
            if a != author:
                continue
            ids = by_body.get(body, [])
            if tid not in ids:
                lost.add(tid)
                missing.setdefault(tid, []).append(f"userline of {author}")
            duplicated += max(0, len(ids) - 1)
    # The userline pages above are hydrated from the tweets table already; a
    # sample of single reads checks GET /v1/tweets/{id} too without a request
    # per tweet (thousands after a long fault on a slow machine).
    for tid in random.sample(sorted(want), min(len(want), 100)):
        if api.request("GET", f"/v1/tweets/{tid}").status_code != 200:
            lost.add(tid)
            missing.setdefault(tid, []).append("GET /v1/tweets/{id}")
    for reader, items in homes().items():
        ids = [t["id"] for t in items]
        for tid in want - set(ids):
            missing.setdefault(tid, []).append(f"home of {reader}")
        lost |= want - set(ids)
        duplicated += len(ids) - len(set(ids))
        duplicated += sum(len(v) - 1 for b, v in _bodies(items).items() if b in acked)
    if missing:
        print(f"lost: {len(lost)} acknowledged tweets; where each is missing:")
        for tid, where in sorted(missing.items()):
            print(f"  {tid}: {', '.join(where)}")
        explain(log_dir, sorted(missing))
    return len(lost), duplicated


# --- Kafka ---------------------------------------------------------------------------


async def _admin(bootstrap: str) -> Any:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    return admin


def partition_leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """``{partition: leader broker id}`` of ``topic``."""

    async def run() -> dict[int, int]:
        admin = await _admin(bootstrap)
        try:
            described: Any = await admin.describe_topics([topic])
            return {p["partition"]: p["leader"] for p in described[0]["partitions"]}
        finally:
            await admin.close()

    return asyncio.run(run())


def topic_replication(bootstrap: str, topic: str) -> tuple[int, str | None]:
    """``(replicas of partition 0, min.insync.replicas)`` of ``topic``;
    ``(0, None)`` while the broker asked does not know the topic yet (a KRaft
    broker learns of a new topic when its metadata log catches up)."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async def run() -> tuple[int, str | None]:
        admin = await _admin(bootstrap)
        try:
            described: Any = await admin.describe_topics([topic])
            if not described or not described[0].get("partitions"):
                return 0, None
            replicas = len(described[0]["partitions"][0]["replicas"])
            configs: Any = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
            isr = None
            for entry in configs[0].resources[0][4]:
                if entry[0] == "min.insync.replicas":
                    isr = entry[1]
            return replicas, isr
        finally:
            await admin.close()

    return asyncio.run(run())


def group_lag(bootstrap: str, group: str, topic: str) -> tuple[int, str]:
    """``(total lag, group state)`` of a consumer group on ``topic``."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> tuple[int, str]:
        admin = await _admin(bootstrap)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await consumer.start()
        try:
            described: Any = await admin.describe_consumer_groups([group])
            state = str(getattr(described[0], "groups", [[None, None, None]])[0][2]) if described else "?"
            committed = await admin.list_consumer_group_offsets(group)
            parts = [TopicPartition(topic, p) for p in (consumer.partitions_for_topic(topic) or set())]
            if not parts:
                await consumer.topics()  # forces a metadata fetch
                parts = [TopicPartition(topic, p) for p in (consumer.partitions_for_topic(topic) or set())]
            ends = await consumer.end_offsets(parts)
            lag = 0
            for tp, end in ends.items():
                meta = committed.get(tp)
                lag += end - (meta.offset if meta is not None and meta.offset >= 0 else 0)
            return lag, state
        finally:
            await consumer.stop()
            await admin.close()

    return asyncio.run(run())


def active_controller(kafka_nodes: list[Any]) -> int:
    """Node id of the active KRaft controller: the broker whose log shows the
    latest (highest-epoch) transition to leader of the metadata quorum."""
    best, best_epoch = 0, -1
    for engine in kafka_nodes:
        try:
            text = engine.main_log.read_text(errors="replace")
        except OSError:
            continue
        for m in re.finditer(
            r"\[RaftManager id=(\d+)\] Completed transition to Leader\(.*?, epoch=(\d+), "
            r"epochStartOffset",
            text,
        ):
            node, epoch = int(m.group(1)), int(m.group(2))
            if epoch > best_epoch:
                best, best_epoch = node, epoch
    return best


def topic_config(bootstrap: str, topic: str, name: str) -> str | None:
    """One configuration value of ``topic`` as the broker describes it."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async def run() -> str | None:
        admin = await _admin(bootstrap)
        try:
            configs: Any = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
            return next((e[1] for e in configs[0].resources[0][4] if e[0] == name), None)
        finally:
            await admin.close()

    return asyncio.run(run())


def isr_sizes(bootstrap: str, topic: str) -> dict[int, int]:
    """``{partition: in-sync replicas}`` of ``topic``; {} when the broker asked
    does not answer (one just killed is still in the metadata until fenced)."""
    from aiokafka.errors import KafkaError

    async def run() -> dict[int, int]:
        admin = await _admin(bootstrap)
        try:
            described: Any = await admin.describe_topics([topic])
            return {p["partition"]: len(p["isr"]) for p in described[0]["partitions"]}
        finally:
            await admin.close()

    try:
        return asyncio.run(run())
    except (KafkaError, OSError, TimeoutError):
        return {}


def replicas_of(bootstrap: str, topic: str) -> dict[int, list[int]]:
    """``{partition: replica broker ids, leader first}`` of ``topic``."""

    async def run() -> dict[int, list[int]]:
        admin = await _admin(bootstrap)
        try:
            described: Any = await admin.describe_topics([topic])
            return {
                p["partition"]: [p["leader"], *[r for r in p["replicas"] if r != p["leader"]]] for p in described[0]["partitions"]
            }
        finally:
            await admin.close()

    return asyncio.run(run())


def reassign(bootstrap: str, topic: str, replicas: dict[int, list[int]]) -> None:
    """Move ``topic``'s partitions to these replicas (AlterPartitionReassignments,
    what kafka-reassign-partitions.sh sends). Two replicas and one of them
    killed leave one in sync while the controller quorum stays up: a second
    broker down would lose the three-voter quorum, one replica alone caps the
    effective min.insync.replicas at 1 (Kafka's min(setting, replicas)), and
    Kafka never throttles an in-sync follower out of the ISR."""
    from aiokafka.protocol.admin import AlterPartitionReassignmentsRequest

    async def run() -> None:
        admin = await _admin(bootstrap)
        try:
            parts = [(p, list(r), {}) for p, r in sorted(replicas.items())]
            response: Any = await admin._send_to_controller(AlterPartitionReassignmentsRequest(30000, [(topic, parts, {})], {}))
            assert response.error_code == 0, (response.error_code, response.error_message)
            for _name, partitions, _tags in response.responses:
                for partition, error_code, message, _ in partitions:
                    assert error_code == 0, (partition, error_code, message)
        finally:
            await admin.close()

    asyncio.run(run())


def produce_acks_all(bootstrap: str, topic: str) -> str:
    """Produce one record with ``acks=all``; the error's class name, or "" if
    acknowledged. Not idempotent, so a retriable refusal is retried until the
    batch expires (5 s) and then raised as itself."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async def run() -> str:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=5000, retry_backoff_ms=200)
        await producer.start()
        try:
            await asyncio.wait_for(producer.send_and_wait(topic, b"probe", key=b"min-isr-probe"), 20)
            return ""
        except (KafkaError, TimeoutError) as exc:
            return type(exc).__name__
        finally:
            await producer.stop()

    return asyncio.run(run())
