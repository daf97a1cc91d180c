"""Helpers for the operations tests: finding the ops tools, a real Prometheus
process, a little realistic load, and a poison message for the DLQ."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from e2e.client import Api, eventually
from e2e.sse import Listener

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
ARTIFACTS = REPO / "test-artifacts"


def tool(name: str) -> str:
    """Path of an ops tool installed by `make ops-tools` (.venv/bin first, then PATH)."""
    local = VENV_BIN / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise AssertionError(f"{name} is not installed: run `make ops-tools` (make test does)")
    return found


def run_tool(argv: list[str], timeout: float = 300, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)


# --------------------------------------------------------------------------
# Prometheus
# --------------------------------------------------------------------------


@dataclass
class Prometheus:
    """Debian's prometheus binary on loopback, scraping static targets every second."""

    port: int
    workdir: Path
    targets: dict[str, str]  # job -> "host:port"
    rule_files: list[Path] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in self.targets.items()
            ],
        }

    def start(self, timeout: float = 30) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        check = run_tool([tool("promtool"), "check", "config", str(config)], timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
        log_dir = ARTIFACTS / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log = open(log_dir / f"prometheus-{self.port}.log", "ab")  # handed to the child, closed below
        self.proc = subprocess.Popen(
            [
                tool("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--web.enable-lifecycle",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}; see {log_dir}")
            try:
                if httpx.get(self.url + "/-/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("prometheus not ready")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None

    def api(self, path: str, **params: str) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=10)
        body: dict[str, Any] = response.json()
        assert body.get("status") == "success", f"{path} {params}: {body}"
        return body["data"]  # type: ignore[no-any-return]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] in ("vector", "scalar"), data
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def has(self, expr: str) -> bool:
        return bool(self.query(expr))


# --------------------------------------------------------------------------
# load
# --------------------------------------------------------------------------


@dataclass
class LoadReport:
    users: list[str]
    tweets: list[str]
    deleted: str


def generate_load(api_url: str, users: int = 4) -> LoadReport:
    """Sign-ups, log-ins, follows, posts, timeline reads, a 404, a delete and
    an unfollow: enough for every fan-out path to record something."""
    api = Api(api_url)
    # A live stream hears the posts (the open-streams and update-latency panels).
    stream = Listener(api_url + "/v1/streaming/public")
    try:
        people = [api.user("ops") for _ in range(users)]
        for name, token in people:
            for other, _ in people:
                if other != name:
                    api.follow(token, name, other)
        tweets = [api.post(token, f"hello from {name} #{i}")["id"] for name, token in people for i in range(3)]
        stream.wait("update", tweets[-1], timeout=30)
        for name, token in people:
            api.page("/v1/timeline", token)
            api.page(f"/v1/users/{name}/tweets")
        api.page("/v1/public")
        assert api.request("GET", "/v1/users/nobody_here_x").status_code == 404
        (first, first_token), (second, _) = people[0], people[1]
        api.unfollow(first_token, first, second)
        deleted = tweets[0]
        assert api.request("DELETE", f"/v1/tweets/{deleted}", first_token).status_code == 204
        # the fan-out has happened once every author's last tweet reached a follower
        _, last_token = people[-1]
        eventually(lambda: len(api.home_ids(last_token)) >= 3 * users - 1, timeout=60, what="fan-out of the load")
        return LoadReport([n for n, _ in people], tweets, deleted)
    finally:
        stream.close()
        api.close()


async def _produce(bootstrap: str, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]] | None = None) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key, headers=headers)
    finally:
        await producer.stop()


def produce(bootstrap: str, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]] | None = None) -> None:
    asyncio.run(_produce(bootstrap, topic, key, value, headers))


def produce_poison(bootstrap: str, topic: str, key: str) -> None:
    """A message no schema accepts: the worker must dead-letter it."""
    produce(bootstrap, topic, key.encode(), b"\x00not json at all " + key.encode())


def worker_metric(metrics_url: str, name: str, labels: Callable[[str], bool] = lambda _: True) -> float:
    total = 0.0
    for line in httpx.get(metrics_url, timeout=5).text.splitlines():
        if line.startswith(name) and not line.startswith("#") and labels(line):
            total += float(line.rsplit(" ", 1)[1])
    return total
