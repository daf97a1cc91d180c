"""The loss of any one node of the three-node cluster is survived (issue #17).

Real engines: three Cassandra nodes and three Kafka brokers
(``deploy/local/infra`` with ``nodes=3``), keyspaces at RF 3 (LOCAL_QUORUM
reads and writes, LOCAL_SERIAL lightweight transactions), topics at RF 3 with
``min.insync.replicas=2``, the producer idempotent with ``acks=all``. Each
test runs steady posting, reads and fan-out through the public API
(``cluster.Load``), injects one fault, restores the node, and checks that
nothing acknowledged was lost or duplicated (``cluster.verify``); every test
adds a row to the table printed at the end of the session and kept in
``docs/reliability.md``.

The rolling upgrade (issue #32) replaces gateways and workers one at a
time under the same load, with the migrate step running beside them, and
allows not even a retry.

The node and broker kills also check the signals the cluster alerts read
(docs/operations/alerts.md): the storage services' drivers report the
killed node down, the gateway's producer reports partitions
under-replicated, while the fault lasts.

Run alone with ``pytest -m cluster`` (hold ``flock /tmp/fanline-cluster.lock``
on a shared machine). Timings are set for a 2-core machine; see
docs/reliability.md for what was measured. ``FANLINE_CLUSTER_KAFKA_VICTIM=<n>``
makes the broker test kill broker ``n`` instead of the active controller.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.local.system import System, metrics_url_of

from .client import PASSWORD, Api, eventually
from .cluster import (
    Load,
    Survived,
    active_controller,
    group_lag,
    isr_sizes,
    partition_leaders,
    produce_acks_all,
    reassign,
    record,
    replicas_of,
    setup_users,
    topic_replication,
    verify,
)

pytestmark = [pytest.mark.cluster, pytest.mark.real_infra, pytest.mark.e2e, pytest.mark.slow]

# How long each fault lasts under load (seconds); FANLINE_CLUSTER_FAULT_S shortens/lengthens.
FAULT_S = float(os.environ.get("FANLINE_CLUSTER_FAULT_S", "20"))
PAUSE_S = float(os.environ.get("FANLINE_CLUSTER_PAUSE_S", "30"))
WARMUP_S = 5.0
#: The rolling upgrade's bound on attempts refused at the gateway's deadline
#: (a slow dependency on shared cores, not the rollout): 2 %.
ROLLOUT_DEADLINE_SHARE = 0.02
# How long the min.insync.replicas test keeps partitions at one in-sync replica, once refused.
ONE_IN_SYNC_S = 10.0
# A fault's signal (docs/operations/alerts.md) may come this much after the fault's
# planned end, and its fault is then prolonged, not failed. The slowest is the
# gateway's producer seeing a killed broker's partitions under-replicated: the
# broker is fenced after 9 s (broker.session.timeout.ms), and the producer's
# metadata refreshes on an error and otherwise every 30 s (METADATA_MAX_AGE_MS),
# its gauges at most every 5 s: up to ~45 s after the kill. Seen at 13.8 s and
# 18.6 s, and once not within 40 s (20 + a grace of 20) on CI's shared cores.
SIGNAL_GRACE_S = 30.0


@pytest.fixture
def api(cluster_system: System) -> Iterator[Api]:
    client = Api(cluster_system.url())
    yield client
    client.close()


@pytest.fixture
def infra(cluster_infra: Any) -> Iterator[Any]:
    """The cluster's launcher; after each test every node is running again."""
    control = cluster_infra.control
    yield control
    for engine in [*control.cassandra_nodes, *control.kafka_nodes]:
        pid = engine.pid()
        if pid is not None:
            os.killpg(os.getpgid(pid), signal.SIGCONT)
    control.start()


def nodetool(infra: Any, node: int, *args: str, timeout: float = 180) -> str:
    out = subprocess.run(infra.nodetool_command(*args, node=node), capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def all_up(infra: Any, node: int = 1) -> bool:
    """True once nodetool on ``node`` sees three nodes Up/Normal."""
    try:
        status = nodetool(infra, node, "status", timeout=60)
    except AssertionError:
        return False
    return sum(1 for line in status.splitlines() if line.startswith("UN ")) == 3


def tweet_keyspace(system: System) -> str:
    return f"{system.extra_env['FANLINE_KEYSPACE_PREFIX']}_tweet_store"


def bring_back(infra: Any, system: System, node: int) -> str:
    """After a Cassandra node returns: wait for the others' hints to it to be
    delivered, then repair the tweet keyspace on it (a SIGKILL loses up to
    ``commitlog_sync_period`` of writes it had acknowledged, which hints do not
    cover). Returns how the node was brought back."""
    eventually(lambda: all_up(infra, node), timeout=120, interval=3, what="all nodes UN")
    host_id = next(
        line.split()[-2]
        for line in nodetool(infra, node, "status").splitlines()
        if line.startswith("UN ") and line.split()[1] == infra.node("cassandra", node).host
    )
    others = [n for n in (1, 2, 3) if n != node]

    def hints_delivered() -> bool:
        return all(host_id not in nodetool(infra, n, "listpendinghints") for n in others)

    how = "hints"
    try:
        eventually(hints_delivered, timeout=60, interval=5, what="hints delivered")
    except AssertionError:
        how = "hints (some pending)"
    nodetool(infra, node, "repair", "-full", tweet_keyspace(system), timeout=300)
    return f"{how} + repair"


def metrics_of(url: str) -> str:
    """The /metrics of the process serving ``url``: on its metrics port."""
    return metrics_url_of(int(url.rsplit(":", 1)[1].split("/")[0]))


def gauge(url: str, name: str, **labels: str) -> float | None:
    """One sample of a service's /metrics (None if it exports no such series)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(metrics_of(url), timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return None


def signal_within(what: str, seen: Any, seconds: float) -> float:
    """Seconds until ``seen()`` held, polled while the fault lasts and up to
    ``SIGNAL_GRACE_S`` longer (the fault then lasts that much longer); fails
    if it never did: the alert built on that signal could not fire."""
    started = time.monotonic()
    eventually(seen, timeout=seconds + SIGNAL_GRACE_S, interval=0.5, what=what)
    return time.monotonic() - started


def run_fault(system: System, api: Api, fault: Any, name: str, after: Any = None, posters: int = 3, readers: int = 2) -> Load:
    """Load, ``fault()`` (returns a note), verify, ``after()`` (returns a note), record a row."""
    ps, rs = setup_users(api, posters, readers)
    load = Load(system.url(), ps, rs).start()
    started = time.monotonic()
    try:
        time.sleep(WARMUP_S)
        extra = fault()
        time.sleep(WARMUP_S)
    finally:
        load.stop()
    duration = time.monotonic() - started
    lost, duplicated = verify(api, load, log_dir=system.log_dir)
    later = after() if after is not None else ""
    row = Survived(
        name,
        duration,
        load.sent,
        load.failed,
        load.retried,
        len(load.acked),
        lost,
        duplicated,
        "; ".join(x for x in (extra, later) if x),
    )
    record(row)
    print(f"\n{row}\nfirst errors: {load.errors[:10]}")
    assert len(load.acked) > 20, "the load never got going"
    assert (lost, duplicated, load.failed) == (0, 0, 0), (row, load.errors[:20])
    return load


def test_cluster_is_replicated(cluster_system: System, cluster_infra: Any, api: Api) -> None:
    """The system really runs on the cluster: keyspaces at RF 3, topics at RF 3
    with min.insync.replicas 2, three live brokers and three Cassandra nodes."""
    env = cluster_system.extra_env
    assert env["FANLINE_CASSANDRA_RF"] == "3" and env["FANLINE_TOPIC_RF"] == "3"
    replicas, min_isr = topic_replication(cluster_infra.kafka_bootstrap, env["FANLINE_EVENTS_TOPIC"])
    assert (replicas, min_isr) == (3, "2")
    infra = cluster_infra.control
    described = nodetool(infra, 1, "describering", tweet_keyspace(cluster_system))
    ranges = re.findall(r"(?<![a-z_])endpoints:\[([^\]]*)\]", described)
    assert len(ranges) == 3, described  # one token per node
    assert all(len(r.split(",")) == 3 for r in ranges), described  # each range on all three


def test_cassandra_node_killed(cluster_system: System, api: Api, infra: Any) -> None:
    """SIGKILL one Cassandra node (the first contact point) under load, restart it."""

    host = infra.node("cassandra", 1).host

    def fault() -> str:
        infra.signal_node("cassandra", 1, signal.SIGKILL)
        started = time.monotonic()
        # What FanlineCassandraNodeDown reads: every storage service's driver sees it down.
        down_after = signal_within(
            "fanline_cassandra_node_up 0 on both storage services",
            lambda: all(
                gauge(cluster_system.url(service), "fanline_cassandra_node_up", node=host) == 0
                for service in ("social-graph", "tweet-store")
            ),
            FAULT_S,
        )
        time.sleep(max(0.0, FAULT_S - (time.monotonic() - started)))
        secs = infra.start_node("cassandra", 1)
        eventually(
            lambda: gauge(cluster_system.url("tweet-store"), "fanline_cassandra_node_up", node=host) == 1,
            timeout=60,
            what="the driver sees the node up again",
        )
        return f"drivers saw it down after {down_after:.1f} s; restarted in {secs:.0f} s"

    run_fault(
        cluster_system,
        api,
        fault,
        f"Cassandra node SIGKILLed for {FAULT_S:.0f} s, restarted",
        after=lambda: "brought back by " + bring_back(infra, cluster_system, 1),
    )


def test_cassandra_node_paused(cluster_system: System, api: Api, infra: Any) -> None:
    """SIGSTOP one Cassandra node for 30 s (a long GC pause, a frozen VM), then SIGCONT."""

    def fault() -> str:
        infra.signal_node("cassandra", 2, signal.SIGSTOP)
        time.sleep(PAUSE_S)
        infra.signal_node("cassandra", 2, signal.SIGCONT)
        return ""

    run_fault(
        cluster_system,
        api,
        fault,
        f"Cassandra node paused (SIGSTOP) {PAUSE_S:.0f} s",
        after=lambda: "brought back by " + bring_back(infra, cluster_system, 2),
    )


def test_kafka_controller_and_leader_killed(cluster_system: System, cluster_infra: Any, api: Api, infra: Any) -> None:
    """SIGKILL the broker that is the active KRaft controller and leads events
    partitions; every acknowledged event is consumed once in effect, the group
    is Stable again with lag 0."""
    env = cluster_system.extra_env
    topic, group = env["FANLINE_EVENTS_TOPIC"], env["FANLINE_WORKER_GROUP"]
    bootstrap = cluster_infra.kafka_bootstrap

    def fault() -> str:
        controller = active_controller(infra.kafka_nodes)
        leaders = partition_leaders(bootstrap, topic)
        victim = controller if controller in leaders.values() else max(set(leaders.values()), key=list(leaders.values()).count)
        victim = int(os.environ.get("FANLINE_CLUSTER_KAFKA_VICTIM", victim))
        led = sorted(p for p, b in leaders.items() if b == victim)
        infra.signal_node("kafka", victim, signal.SIGKILL)
        started = time.monotonic()
        # What FanlineKafkaUnderReplicated reads: the gateway's producer metadata.
        under_after = signal_within(
            "events partitions under-replicated in the gateway's producer metadata",
            lambda: (gauge(cluster_system.url(), "fanline_kafka_partitions_under_replicated") or 0) > 0,
            FAULT_S,
        )
        time.sleep(max(0.0, FAULT_S - (time.monotonic() - started)))
        new_controller = active_controller([k for k in infra.kafka_nodes if k.node != victim])
        secs = infra.start_node("kafka", victim)
        return (
            f"broker {victim} (controller: {victim == controller}, led partitions {led}); "
            f"new controller {new_controller}; the gateway saw partitions under-replicated after "
            f"{under_after:.1f} s; restarted in {secs:.0f} s"
        )

    run_fault(cluster_system, api, fault, f"Kafka broker SIGKILLed for {FAULT_S:.0f} s, restarted")
    eventually(
        lambda: group_lag(bootstrap, group, topic) == (0, "Stable"),
        timeout=120,
        interval=2,
        what="consumer group Stable with lag 0",
    )


def test_rolling_restart(cluster_system: System, api: Api, infra: Any) -> None:
    """Restart (SIGTERM, start) every Cassandra node, then every broker, one at a time, under load."""

    def fault() -> str:
        took = []
        for kind in ("cassandra", "kafka"):
            for n in (1, 2, 3):
                t0 = time.monotonic()
                infra.stop_node(kind, n)
                infra.start_node(kind, n)
                if kind == "cassandra":
                    peer = 3 if n != 3 else 1
                    eventually(
                        lambda peer=peer: all_up(infra, peer),  # type: ignore[misc]
                        timeout=120,
                        interval=2,
                        what="all nodes UN",
                    )
                took.append(time.monotonic() - t0)
        return f"6 restarts, {min(took):.0f}-{max(took):.0f} s each"

    run_fault(cluster_system, api, fault, "rolling restart: 3 Cassandra nodes, then 3 brokers")


def test_lwt_rules_hold_with_a_node_down(cluster_system: System, api: Api, infra: Any) -> None:
    """One user per name, one tweet per Idempotency-Key, under concurrency,
    while one Cassandra node is down (LOCAL_SERIAL needs 2 of 3)."""
    url = cluster_system.url()
    name, token = api.user("lwt")
    infra.signal_node("cassandra", 3, signal.SIGKILL)
    sent = failed = retried = lost_201 = 0
    started = time.monotonic()
    try:
        rounds = 5
        contenders = 6
        for _ in range(rounds):
            wanted = api.unique_name("n")
            key = f"k-{wanted}"
            results: list[tuple[str, int, str]] = []

            def one(kind: str, wanted: str = wanted, key: str = key, results: list[tuple[str, int, str]] = results) -> None:
                nonlocal sent, retried
                with httpx.Client(base_url=url, timeout=30) as c:
                    for attempt in range(20):
                        sent += 1
                        if kind == "signup":
                            r = c.post("/v1/users", json={"username": wanted, "password": PASSWORD})
                        else:
                            r = c.post(
                                "/v1/tweets",
                                json={"body": f"once {key}"},
                                headers={"Idempotency-Key": key, "Authorization": f"Bearer {token}"},
                            )
                        if r.status_code < 500:
                            # (a 409 after a 5xx: this sign-up may have been the winner, its 201 lost)
                            code = 4090 if kind == "signup" and r.status_code == 409 and attempt else r.status_code
                            results.append((kind, code, r.json().get("id", "") if r.status_code < 300 else ""))
                            return
                        retried += 1
                        time.sleep(0.5)

            threads = [threading.Thread(target=one, args=(k,)) for k in ("signup", "tweet") for _ in range(contenders)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            signups = sorted(code for kind, code, _ in results if kind == "signup")
            tweets = [(code, tid) for kind, code, tid in results if kind == "tweet"]
            failed += 2 * contenders - len(results)
            if 201 not in signups and 4090 in signups:
                # Known, documented (reliability.md): a sign-up whose LWT
                # applied but whose answer missed the gateway's deadline
                # (Paxos contention with a node down) gets 503, and its
                # retry finds the name taken. The rule under test -- one
                # account per name -- must still hold: one account, the
                # contenders' own (their password signs in).
                lost_201 += 1
                assert api.http.post("/v1/sessions", json={"username": wanted, "password": PASSWORD}).status_code == 200
                signups = [201] + [409] * (len(signups) - 1)
            signups = [409 if c == 4090 else c for c in signups]
            assert signups == [201] + [409] * (contenders - 1), signups
            assert len(tweets) == contenders and len({tid for _, tid in tweets}) == 1, tweets
            assert sorted(code for code, _ in tweets)[-1] == 201 or all(c == 200 for c, _ in tweets), tweets
            userline = [t for t in api.all_items(f"/v1/users/{name}/tweets") if t["body"] == f"once {key}"]
            assert len(userline) == 1, userline
    finally:
        infra.start_node("cassandra", 3)
    record(
        Survived(
            "LWT races (6 sign-ups of one name, 6 posts of one key) x 5, Cassandra node down",
            time.monotonic() - started,
            sent,
            failed,
            retried,
            2 * 5,
            0,
            0,
            f"exactly one account per name ({lost_201} round(s) where the winner's 201 missed the deadline and its "
            "retry got 409); one tweet per key",
        )
    )
    assert failed == 0


def metric_total(url: str, name: str, labels: str = "") -> float:
    text = httpx.get(url, timeout=10).text
    return sum(
        float(m.group(2))
        for m in re.finditer(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", text, re.M)
        if labels in (m.group(1) or "")
    )


def test_topics_ensure_raises_min_insync_replicas_on_an_existing_topic(cluster_system: System, cluster_infra: Any) -> None:
    """A topic that exists with a lower min.insync.replicas (the broker default
    of most installations is 1; a tool or an older release created it) is
    corrected by ``fanline topics ensure`` -- the code path the services run
    at start-up -- and keeps its other settings."""
    import asyncio

    from aiokafka.admin import NewTopic

    from .cluster import _admin, topic_config

    bootstrap = cluster_infra.kafka_bootstrap
    topic = f"{cluster_system.extra_env['FANLINE_EVENTS_TOPIC']}.old"

    async def create() -> None:
        admin = await _admin(bootstrap)
        try:
            configs = {"min.insync.replicas": "1", "retention.ms": "86400000"}
            await admin.create_topics([NewTopic(topic, 8, 3, topic_configs=configs)])
        finally:
            await admin.close()

    asyncio.run(create())
    # A KRaft broker applies a topic's configuration when its copy of the
    # metadata log catches up, a moment after the controller committed it;
    # describe_configs is answered by whichever broker the client picked, so
    # each read below waits for the change to reach that broker.
    # The windows are generous: this phase runs beside the engine-free suite, and
    # each `fanline topics` call starts a Python process on two busy cores.
    eventually(lambda: topic_replication(bootstrap, topic) == (3, "1"), timeout=60, what="the topic is created with 1")
    env = {**cluster_system.env(), "FANLINE_EVENTS_TOPIC": topic}
    fanline = str(Path(sys.executable).with_name("fanline"))

    def topics(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([fanline, "topics", command], env=env, capture_output=True, text=True, timeout=120, check=False)

    def verify_until(ok: Callable[[subprocess.CompletedProcess[str]], bool], what: str) -> subprocess.CompletedProcess[str]:
        """``fanline topics verify`` until ``ok`` holds: the broker it asks may learn
        of the topic, or of its change, a moment after the one asked before."""
        last: list[subprocess.CompletedProcess[str]] = []

        def check() -> bool:
            last[:] = [topics("verify")]
            return ok(last[0])

        try:
            eventually(check, timeout=90, interval=1.0, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the last verify said: {last[0].stdout}{last[0].stderr}") from None
        return last[0]

    verify_until(lambda v: v.returncode == 1 and "min.insync.replicas TOO LOW" in v.stdout, "verify reports TOO LOW")
    done = topics("ensure")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{topic}: 8 partitions, replication factor 3, min.insync.replicas 2 (raised from 1), ok" in done.stdout, done.stdout
    eventually(lambda: topic_replication(bootstrap, topic) == (3, "2"), timeout=60, what="min.insync.replicas 2 is visible")
    assert topic_config(bootstrap, topic, "retention.ms") == "86400000", "its other settings are kept"
    verified = verify_until(lambda v: v.returncode == 0, "verify passes once every broker has the change")
    assert "raised" not in verified.stdout, verified.stdout


def test_a_produce_is_refused_with_one_in_sync_replica_and_posts_wait_in_the_outbox(
    cluster_system: System, cluster_infra: Any, api: Api, infra: Any
) -> None:
    """Under load, every partition of the events topic is first moved to two
    of the three brokers (its leader and broker 3; ``cluster.reassign``), then
    broker 3 is paused (SIGSTOP: a frozen VM, a long GC; no JVM restart to
    wait for) until it is fenced: each partition has one in-sync replica of
    two while the controller quorum stays up (two of three voters; a second
    broker down would lose it). An ``acks=all`` produce is refused
    (min.insync.replicas 2), the gateway's too, yet posts are still accepted
    -- their events wait in the outbox -- and once the broker resumes and the
    partitions have their three replicas again, everything acknowledged is
    delivered exactly once."""
    env = cluster_system.extra_env
    bootstrap, topic = cluster_infra.kafka_bootstrap, env["FANLINE_EVENTS_TOPIC"]
    metrics = cluster_system.metrics_url("api")
    refusals = ("NotEnoughReplicasError", "NotEnoughReplicasAfterAppendError")
    api_log = cluster_system.log_dir / "api.log" if cluster_system.log_dir else None
    victim = 3

    def failed_sends() -> float:
        # The gateway's idempotent producer retries a refusal until its send
        # times out (5 s): counted as that, with aiokafka's warning naming the refusal.
        return metric_total(metrics, "fanline_kafka_produce_errors_total")

    def refusals_logged() -> int:
        text = api_log.read_text(errors="replace") if api_log is not None and api_log.exists() else ""
        return sum(text.count(e) for e in refusals)

    before, logged_before = failed_sends(), refusals_logged()
    seen: dict[str, Any] = {}

    def fault() -> str:
        original = replicas_of(bootstrap, topic)
        assert all(len(r) == 3 for r in original.values()), original
        pairs = {p: [r[0] if r[0] != victim else r[1], victim] for p, r in original.items()}
        reassign(bootstrap, topic, pairs)
        eventually(lambda: all(len(r) == 2 for r in replicas_of(bootstrap, topic).values()), timeout=60, what="two replicas")
        infra.signal_node("kafka", victim, signal.SIGSTOP)
        try:
            # The broker is fenced after broker.session.timeout.ms (9 s), then the ISRs shrink.
            eventually(
                lambda: set(isr_sizes(bootstrap, topic).values()) == {1}, timeout=90, interval=1, what="one in-sync replica"
            )
            started = time.monotonic()
            seen["refused"] = produce_acks_all(bootstrap, topic)
            eventually(lambda: failed_sends() > before, timeout=30, interval=0.5, what="a gateway send failed")
            eventually(
                lambda: metric_total(metrics, "fanline_outbox_pending_events") > 0,
                timeout=30,
                interval=0.5,
                what="an outbox backlog",
            )
            seen["pending"] = metric_total(metrics, "fanline_outbox_pending_events")
            time.sleep(max(0.0, ONE_IN_SYNC_S - (time.monotonic() - started)))
            # The gateway's producer may first time out on the paused broker
            # and be replaced; the refusal reaches its log when the new one
            # sends, a few seconds later (seen 1 s after the snapshot once).
            try:
                eventually(lambda: refusals_logged() > logged_before, timeout=20, interval=0.5, what="a refusal logged")
            except AssertionError:
                pass  # reported by the assertion below, with the figures
            seen["failed_sends"] = failed_sends() - before
            seen["logged"] = refusals_logged() - logged_before
        finally:
            infra.signal_node("kafka", victim, signal.SIGCONT)
        resumed = time.monotonic()
        eventually(lambda: set(isr_sizes(bootstrap, topic).values()) == {2}, timeout=120, interval=1, what="two in sync again")
        rejoined = time.monotonic() - resumed
        reassign(bootstrap, topic, original)
        eventually(lambda: set(isr_sizes(bootstrap, topic).values()) == {3}, timeout=120, interval=1, what="three in sync again")
        return (
            f"acks=all produce refused ({seen['refused']}); the gateway's sends failed {seen['failed_sends']:.0f} times "
            f"({seen['logged']} NotEnoughReplicas answers logged), outbox held up to {seen['pending']:.0f} events; "
            f"broker back in the ISRs {rejoined:.0f} s after it resumed"
        )

    def drained() -> str:
        eventually(
            lambda: metric_total(metrics, "fanline_outbox_pending_events") == 0, timeout=120, interval=1, what="outbox drained"
        )
        return "outbox drained after"

    run_fault(
        cluster_system,
        api,
        fault,
        f"Kafka: partitions on two brokers, one paused: one in-sync replica (min ISR 2) for {ONE_IN_SYNC_S:.0f} s",
        after=drained,
    )
    assert seen["refused"] in refusals, seen
    assert seen["failed_sends"] > 0 and seen["logged"] > 0 and seen["pending"] > 0, seen


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _cassandra_nodes_up(url: str) -> list[float]:
    """Every ``fanline_cassandra_node_up`` sample of one storage service."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(metrics_of(url), timeout=5).text
    return [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "fanline_cassandra_node_up"
    ]


def test_rolling_upgrade_of_gateways_and_workers(cluster_system: System, api: Api) -> None:
    """A Deployment rollout, one replica at a time, under load (issue #32):
    two gateways behind a balancer (the load's pool) and two workers in the
    consumer group. The release's migrate step runs under load while the
    rollout starts (on a current schema it runs no DDL:
    tests/contract/test_migrations_lock.py). Each gateway leaves the pool
    (a Service drops a terminating pod's endpoint), gets a moment to finish
    what it holds, stops (SIGTERM) and a new one takes its place once ready; then each worker stops and a new one
    joins the group (a rebalance each) before the next goes. 0 lost, 0
    duplicated, 0 failed operations, and no retry the rollout caused: no
    refused or reset connection, no 5xx but the gateway's own 2 s deadline.
    Those deadline refusals (a live gateway whose dependency answered late)
    are reported and may be at most ``ROLLOUT_DEADLINE_SHARE`` of the
    attempts: CI runs this beside the engine-free tests on two shared cores,
    and a fresh-clone run there (2026-11-28) met the deadline twice in 459
    attempts while no process of the request path was being replaced.
    The new processes run the same code: what old and new code must agree
    on, the events, is tested with the previous release's real events
    (tests/unit/test_event_versions.py). About a minute (60 s on 2 cores)."""
    s = cluster_system
    # A node an earlier test restarted is back for both storage services'
    # drivers: this test is about the rollout, not a node still rejoining.
    eventually(
        lambda: all(_cassandra_nodes_up(s.url(name)) == [1.0] * 3 for name in ("social-graph", "tweet-store")),
        timeout=120,
        interval=1,
        what="three Cassandra nodes up for both storage services",
    )
    worker_url = f"http://127.0.0.1:{s.ports['fanout-worker'] + 100}"
    # The second worker joins the group while the second gateway starts.
    workers = {"fanout-worker": s.url("fanout-worker"), s.start_worker_replica(1): worker_url}
    gateways = {"api": s.url(), "api-1": s.start_api_replica(1)}
    ps, rs = setup_users(api, 3, 2)
    eventually(lambda: _ready(worker_url), timeout=90, interval=0.5, what="the second worker joined")
    pool = list(gateways.values())
    try:
        _roll(s, api, ps, rs, pool, gateways, workers)
    finally:
        s.stop_service("api-1")
        s.stop_service("fanout-worker-2")


def _roll(
    s: System,
    api: Api,
    ps: list[tuple[str, str]],
    rs: list[tuple[str, str]],
    pool: list[str],
    gateways: dict[str, str],
    workers: dict[str, str],
) -> None:
    load = Load(s.url(), ps, rs, gateways=lambda: list(pool)).start()
    started = time.monotonic()
    steps: list[str] = []

    def replace(name: str, url: str) -> None:
        t0, begun = time.monotonic(), time.strftime("%H:%M:%S")
        s.stop_service(name)
        if name == "api-1":
            s.start_api_replica(1)
        elif name == "fanout-worker-2":
            s.start_worker_replica(1)
        else:
            s.start_service(name)
        eventually(lambda: _ready(url), timeout=90, interval=0.5, what=f"the new {name}")
        steps.append(f"{name} {time.monotonic() - t0:.0f} s from {begun}")

    migrate: subprocess.Popen[str] | None = None
    try:
        time.sleep(WARMUP_S)
        # As `kubectl apply` does, the migrate step runs while the rollout
        # starts (in production new pods wait for its schema version).
        migrate = subprocess.Popen(
            [str(Path(s.python).parent / "fanline"), "migrate"],
            env=s.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, url in gateways.items():
            pool.remove(url)
            time.sleep(1.0)  # a preStop pause: requests it already holds finish
            replace(name, url)
            pool.append(url)
        for name, url in workers.items():
            replace(name, url)
        output, _ = migrate.communicate(timeout=120)
        assert migrate.returncode == 0, output
    finally:
        load.stop()
        if migrate is not None and migrate.poll() is None:
            migrate.kill()
            migrate.wait()
    lost, duplicated = verify(api, load, log_dir=s.log_dir)
    row = Survived(
        "rolling upgrade: 2 gateways, then 2 workers, replaced one at a time",
        time.monotonic() - started,
        load.sent,
        load.failed,
        load.retried,
        len(load.acked),
        lost,
        duplicated,
        "fanline migrate beside the first replacements (schema current); "
        + ", ".join(steps)
        + f"; retried: {load.deadline_refusals} at the gateway's deadline, {load.retried - load.deadline_refusals} other",
    )
    record(row)
    print(f"\n{row}\nfirst errors: {load.errors[:10]}")
    assert len(load.acked) > 20, "the load never got going"
    assert (lost, duplicated, load.failed) == (0, 0, 0), (row, load.errors[:20])
    assert load.retried == load.deadline_refusals, ("a retry the rollout caused", row, load.errors[:20])
    assert load.deadline_refusals <= ROLLOUT_DEADLINE_SHARE * load.sent, (row, load.errors[:20])
