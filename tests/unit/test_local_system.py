"""The local launcher's background-work settings (deploy/local/system.py):
the fan-out worker writing through its own tweet-store replica, and the
worker and that replica at a lower CPU priority — without starting any
service (one real child process checks the niceness it runs at); and the
embedded broker's start when its port is held (real tansu, real sockets)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from deploy.local.system import FANOUT_GRAPH_REPLICA, FANOUT_REPLICA, HOSTED, SERVICES, System, child_setup


def test_default_system_is_unchanged(tmp_path: Path) -> None:
    system = System(data_dir=tmp_path)
    assert system.services() == SERVICES
    assert FANOUT_REPLICA not in system.ports
    assert all(system.nice_of(name) == 0 for name in SERVICES)
    assert all(system.role_env(name) == {} for name in SERVICES)


def test_fanout_replica_takes_the_workers_writes(tmp_path: Path) -> None:
    system = System(data_dir=tmp_path, base_port=9000, backend="cassandra", fanout_replica=True, background_nice=10)
    services = system.services()
    for replica in (FANOUT_REPLICA, FANOUT_GRAPH_REPLICA):  # ready before the worker needs them
        assert services.index(replica) < services.index("fanout-worker")
    assert system.ports[FANOUT_REPLICA] == 9005 and system.ports[FANOUT_GRAPH_REPLICA] == 9004
    assert len(set(system.ports.values())) == len(system.ports) and system.broker_port not in system.ports.values()
    assert system.role_env(FANOUT_REPLICA) == {"FANLINE_TWEET_STORE_PORT": "9005"}
    assert system.role_env(FANOUT_GRAPH_REPLICA) == {"FANLINE_SOCIAL_GRAPH_PORT": "9004"}
    for worker in ("fanout-worker", "fanout-worker-2"):
        assert system.role_env(worker) == {
            "FANLINE_TWEET_STORE_URL": "http://127.0.0.1:9005",
            "FANLINE_SOCIAL_GRAPH_URL": "http://127.0.0.1:9004",
        }
        assert system.nice_of(worker) == 10
    # The gateway keeps the ordinary tweet-store, at normal priority.
    assert system.env()["FANLINE_TWEET_STORE_URL"] == "http://127.0.0.1:9002"
    assert system.env()["FANLINE_SOCIAL_GRAPH_URL"] == "http://127.0.0.1:9001"
    assert system.role_env("api") == {} and system.nice_of("api") == 0
    assert system.nice_of("tweet-store") == 0 and system.nice_of(FANOUT_REPLICA) == 10
    assert system.nice_of("social-graph") == 0 and system.nice_of(FANOUT_GRAPH_REPLICA) == 10


def test_the_embedded_broker_gets_fausts_fetch_and_kafka_the_workers_default(tmp_path: Path, monkeypatch) -> None:
    for name in ("FANLINE_WORKER_FETCH_MIN_BYTES", "FANLINE_WORKER_FETCH_MAX_WAIT_MS"):
        monkeypatch.delenv(name, raising=False)
    embedded = System(data_dir=tmp_path).env()
    assert (embedded["FANLINE_WORKER_FETCH_MIN_BYTES"], embedded["FANLINE_WORKER_FETCH_MAX_WAIT_MS"]) == ("1", "1500")
    kafka = System(data_dir=tmp_path, kafka_bootstrap="127.0.0.1:9092", backend="cassandra").env()
    assert "FANLINE_WORKER_FETCH_MIN_BYTES" not in kafka and "FANLINE_WORKER_FETCH_MAX_WAIT_MS" not in kafka
    monkeypatch.setenv("FANLINE_WORKER_FETCH_MAX_WAIT_MS", "50")  # an operator's own setting stands
    assert System(data_dir=tmp_path).env()["FANLINE_WORKER_FETCH_MAX_WAIT_MS"] == "50"


def test_colocate_runs_the_stores_in_the_gateways_process(tmp_path: Path) -> None:
    system = System(data_dir=tmp_path, base_port=9000, colocate=True)
    assert system.services() == ("api", "fanout-worker")  # two processes
    assert system.serving() == (*HOSTED, "api", "fanout-worker")  # four services answering on their ports
    assert system.ports["tweet-store"] == 9002 and system.url("social-graph") == "http://127.0.0.1:9001"
    assert system.role_env("api") == {"FANLINE_HOSTED_SERVICES": "social-graph,tweet-store"}
    assert system.process_of("tweet-store") == "api" and system.process_of("fanout-worker") == "fanout-worker"
    # The worker still reaches the stores at their addresses (in the gateway's process).
    assert system.env()["FANLINE_TWEET_STORE_URL"] == "http://127.0.0.1:9002"
    assert system.role_env("fanout-worker") == {}  # it calls the gateway's process
    # With replicas for the fan-out, the worker runs them in its own process.
    with_replicas = System(data_dir=tmp_path, backend="cassandra", colocate=True, fanout_replica=True, background_nice=10)
    assert with_replicas.services() == ("api", "fanout-worker")
    assert with_replicas.role_env("fanout-worker") == {"FANLINE_HOSTED_SERVICES": "social-graph,tweet-store"}
    assert with_replicas.nice_of("fanout-worker") == 10 and with_replicas.nice_of("api") == 0


def test_background_nice_without_replica_lowers_the_worker_only(tmp_path: Path) -> None:
    system = System(data_dir=tmp_path, background_nice=5)
    assert system.nice_of("fanout-worker") == 5
    assert system.nice_of("tweet-store") == 0
    assert system.role_env("fanout-worker") == {}


def test_child_setup_sets_the_niceness_of_the_child() -> None:
    before = os.nice(0)
    out = subprocess.run(
        [sys.executable, "-c", "import os; print(os.nice(0))"],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=child_setup(7),
    )
    assert int(out.stdout) == min(19, before + 7)
    assert os.nice(0) == before  # the parent is untouched


def test_the_embedded_broker_moves_off_a_port_a_connection_holds(tmp_path: Path) -> None:
    """The broker's port (base + 11092) is in Linux's ephemeral range, so a client
    connection's local end can hold it, and tansu exits at once (EADDRINUSE): a CI run lost
    a test module to that. The first start now takes a free port instead, which
    ``bootstrap`` names, and a restart keeps it. Real tansu, real sockets."""
    with socket.create_server(("127.0.0.1", 0)) as server, socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))  # an ephemeral port, as the kernel hands one to a client
        held = holder.getsockname()[1]
        holder.connect(server.getsockname())
        system = System(data_dir=tmp_path, base_port=held - 11092, log_dir=tmp_path / "logs")
        assert system.broker_port == held
        try:
            system.start_broker(timeout=30)
            port = system.broker_port
            assert port != held and system.bootstrap == f"127.0.0.1:{port}"
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                pass
            system.stop_broker()
            system.start_broker(timeout=30)  # a restart: the same port, which the services know
            assert system.broker_port == port and system.procs["broker"].poll() is None
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                pass
        finally:
            system.stop_broker()


def test_a_service_that_exits_at_start_is_reported_with_its_logs_end(tmp_path: Path) -> None:
    """CI shows the exception, not the artifacts: the error carries the log's end."""
    system = System(data_dir=tmp_path, log_dir=tmp_path / "logs")
    lines = "print('\\n'.join(f'line {i}' for i in range(40)))"
    script = f"import sys; {lines}; print('Unavailable: no schema agreement'); sys.exit(3)"
    system._spawn("social-graph", [sys.executable, "-c", script])
    system.procs["social-graph"].wait(30)
    try:
        system.wait_ready(timeout=30, services=("social-graph",))
    except RuntimeError as exc:
        message = str(exc)
    else:
        raise AssertionError("wait_ready did not notice the exit")
    assert message.startswith("social-graph exited with 3 during start-up; the end of ")
    assert message.endswith("Unavailable: no schema agreement") and "line 39" in message and "line 10\n" not in message
