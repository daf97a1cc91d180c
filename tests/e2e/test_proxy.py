"""Two gateway replicas behind a real reverse proxy, limits shared in a real
Redis (issue #29 item 4).

nginx (Debian's package, ``make proxy-tools``) listens on loopback and
balances round-robin over two gateway replicas of one embedded system,
setting ``X-Forwarded-For`` as any proxy does; the replicas trust it
(``FANLINE_TRUSTED_PROXIES=127.0.0.1``) and keep their abuse-limit counters
in a ``redis-server`` this module starts (``FANLINE_RATE_LIMIT_STORAGE``).
Clients connect to nginx from different loopback addresses (127.0.0.2, ...),
so each is one client the way a browser behind the Internet would be.

* per address, per user and failed log-ins per address: exactly the limit
  is let through, although every other request lands on the other replica
  (per-replica counters would let through twice as much);
* clients are told apart by the forwarded address, not the proxy's: one
  address spending its budget costs another nothing, and a client forging
  ``X-Forwarded-For`` is still counted under its own address.

Thresholds are "per day", so no window turns over during the test.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from deploy.local.system import System, metrics_url_of

from .client import PASSWORD
from .conftest import PORT_OFFSET, make_system

pytestmark = [pytest.mark.e2e]

BASE = 24100  # the system; nginx and redis-server on BASE + 90, + 91
PER_ADDRESS, PER_USER, FAILED_LOGINS = 6, 8, 3
LIMITS = {
    "FANLINE_RATE_LIMIT_PER_ADDRESS": f"{PER_ADDRESS} per day",
    "FANLINE_RATE_LIMIT_PER_USER": f"{PER_USER} per day",
    "FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_ADDRESS": f"{FAILED_LOGINS} per day",
    "FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_USERNAME": "1000 per day",
    "FANLINE_TRUSTED_PROXIES": "127.0.0.1",  # nginx connects to the replicas from here
}


def binary(name: str) -> str:
    """A Debian binary (in /usr/sbin for nginx, off a non-root PATH)."""
    found = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None)
    if found is None:
        message = f"{name} is not installed: run `make proxy-tools` (Debian's nginx and redis-server)"
        if os.environ.get("REQUIRE_REAL_INFRA", "").strip().lower() in {"1", "true", "yes", "on"}:
            pytest.fail(message)
        pytest.skip(message)
    return found


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = BASE + PORT_OFFSET + 91
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [
            binary("redis-server"),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=(workdir / "redis.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_port(port)
        yield f"redis://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def replicas(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[System, list[str]]]:
    system = make_system("embedded", BASE, tmp_path_factory.mktemp("proxied"), FANLINE_RATE_LIMIT_STORAGE=redis_url, **LIMITS)
    system.start()
    try:
        yield system, [system.url(), system.start_api_replica(1)]
    finally:
        system.stop()


@pytest.fixture(scope="module")
def proxy(replicas: tuple[System, list[str]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    _, urls = replicas
    port = BASE + PORT_OFFSET + 90
    prefix = tmp_path_factory.mktemp("nginx")
    upstreams = "\n".join(f"    server {url.removeprefix('http://')};" for url in urls)
    (prefix / "nginx.conf").write_text(
        f"""{"user root;" if os.geteuid() == 0 else ""}
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log {prefix}/access.log;
  client_body_temp_path {prefix}/body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  upstream gateways {{
{upstreams}
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://gateways;
      proxy_set_header Host $host;
      # What every proxy does: append the address it saw to what came in.
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
    }}
  }}
}}
"""
    )
    proc = subprocess.Popen(
        [binary("nginx"), "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"],
        stdout=(prefix / "stdout.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


def client(proxy: str, address: str, **headers: str) -> httpx.Client:
    """A client connecting to the proxy from ``address`` (any of 127/8 is ours)."""
    return httpx.Client(base_url=proxy, timeout=30, headers=headers, transport=httpx.HTTPTransport(local_address=address))


def served_by(urls: list[str], route: str) -> list[float]:
    """Requests of ``route`` each replica answered (its metrics port)."""
    counts = []
    for url in urls:
        text = httpx.get(metrics_url_of(int(url.rsplit(":", 1)[1])), timeout=10).text
        pattern = rf'^fanline_http_requests_total\{{[^}}]*route="{re.escape(route)}"[^}}]*\}} (\S+)$'
        counts.append(sum(float(v) for v in re.findall(pattern, text, re.M)))
    return counts


def until_refused(c: httpx.Client, method: str, path: str, most: int, **kwargs: object) -> list[int]:
    statuses = []
    for _ in range(most):
        statuses.append(c.request(method, path, **kwargs).status_code)  # type: ignore[arg-type]
        if statuses[-1] == 429:
            break
    return statuses


def test_the_per_address_limit_holds_across_replicas_by_the_forwarded_address(
    proxy: str, replicas: tuple[System, list[str]]
) -> None:
    _, urls = replicas
    before = served_by(urls, "/v1/public")
    with client(proxy, "127.0.0.2") as a, client(proxy, "127.0.0.3") as b:
        assert until_refused(a, "GET", "/v1/public", 3 * PER_ADDRESS) == [200] * PER_ADDRESS + [429]
        # Another client behind the same proxy is not counted with the first.
        first = b.get("/v1/public")
        assert first.status_code == 200 and first.headers["RateLimit-Remaining"] == str(PER_ADDRESS - 1)
        # A forged X-Forwarded-For is kept by nginx, which appends the address
        # it saw: the gateway counts the nearest untrusted hop, the real one.
        with client(proxy, "127.0.0.4", **{"X-Forwarded-For": "127.0.0.3"}) as forger:
            assert until_refused(forger, "GET", "/v1/public", 3 * PER_ADDRESS) == [200] * PER_ADDRESS + [429]
        assert b.get("/v1/public").headers["RateLimit-Remaining"] == str(PER_ADDRESS - 2)
    after = served_by(urls, "/v1/public")
    share = [a - b for a, b in zip(after, before, strict=True)]
    # Round robin: each replica answered about half; alone, each would have let PER_ADDRESS through.
    assert all(s >= PER_ADDRESS // 2 for s in share), share


def test_the_per_user_limit_holds_across_replicas_and_addresses(proxy: str) -> None:
    with client(proxy, "127.0.0.5") as c:
        r = c.post("/v1/users", json={"username": "proxied", "password": PASSWORD})
        assert r.status_code == 201, r.text
        token = c.post("/v1/sessions", json={"username": "proxied", "password": PASSWORD}).json()["token"]
    auth = {"Authorization": f"Bearer {token}"}
    statuses = []
    # The user's requests come from two addresses, through both replicas: one budget.
    with client(proxy, "127.0.0.6", **auth) as one, client(proxy, "127.0.0.7", **auth) as other:
        for i in range(3 * PER_USER):
            statuses.append((one if i % 3 else other).get("/v1/timeline").status_code)
            if statuses[-1] == 429:
                break
    assert statuses == [200] * PER_USER + [429], statuses


def test_failed_log_ins_are_limited_per_forwarded_address_across_replicas(proxy: str) -> None:
    with client(proxy, "127.0.0.8") as c:
        assert c.post("/v1/users", json={"username": "locked", "password": PASSWORD}).status_code == 201
    with client(proxy, "127.0.0.9") as guesser, client(proxy, "127.0.0.10") as owner:
        wrong = [
            guesser.post("/v1/sessions", json={"username": "locked", "password": "not the password"})
            for _ in range(FAILED_LOGINS)
        ]
        assert [r.status_code for r in wrong] == [401] * FAILED_LOGINS
        # Spent for that address, whichever replica answers -- even with the right password ...
        refused = guesser.post("/v1/sessions", json={"username": "locked", "password": PASSWORD})
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
        assert guesser.post("/v1/sessions", json={"username": "locked", "password": PASSWORD}).status_code == 429
        # ... but not for the owner, at their own address behind the same proxy.
        assert owner.post("/v1/sessions", json={"username": "locked", "password": PASSWORD}).status_code == 200
