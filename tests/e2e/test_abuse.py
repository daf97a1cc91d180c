"""Abuse limits as api.md ("Rate limits") says, and argon2 bounded by memory
(issue #15), on systems of their own with small thresholds — set through the
environment, exactly as an operator (or a black-box check of ``make run``)
would.

* Every response of a limited route carries ``RateLimit-Limit``,
  ``RateLimit-Remaining`` and ``RateLimit-Reset``; over the limit, ``429
  rate_limited`` with ``Retry-After`` too.
* Anonymous requests count per client address; ``X-Forwarded-For`` counts
  only from a trusted proxy (here: loopback is trusted).
* Authenticated requests count per user: a spent address does not stop a
  signed-in user, and a forged token does not spend anyone's budget.
* Failed log-ins are limited per username and per address — also through
  the web sign-in form — and then even the right password gets 429.
* A flood of log-ins with production-sized argon2 (64 MiB each) keeps
  social-graph's memory within its budget: the excess waits briefly, then
  gets ``503`` + ``Retry-After``, never a 500 or an OOM.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deploy.local.system import System

from .client import PASSWORD, Api
from .conftest import make_system

pytestmark = [pytest.mark.e2e]
HEADERS = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    system = make_system(
        "embedded",
        19700,
        tmp_path_factory.mktemp("limited"),
        FANLINE_RATE_LIMIT_PER_ADDRESS="12 per minute",
        FANLINE_RATE_LIMIT_PER_USER="20 per minute",
        FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_ADDRESS="4 per minute",
        FANLINE_RATE_LIMIT_FAILED_LOGINS_PER_USERNAME="3 per minute",
        FANLINE_TRUSTED_PROXIES="127.0.0.1",
    )
    system.start()
    yield system
    system.stop()


def within_one_window(needed_s: float = 15.0) -> None:
    """Wait for the next minute when fewer than ``needed_s`` seconds of this
    one are left. The limiter's windows are aligned to the epoch minute and a
    sliding-window counter weighs the previous minute's hits by what is left
    of it, so a sequence that straddles the turn of a minute is let through
    one request later than the limit says (a CI run saw 4 failed log-ins
    straddle it and the fifth get 401, not 429). The limit's arithmetic is
    tested in tests/unit/test_ratelimit.py; these tests check the wiring."""
    left = 60.0 - time.time() % 60.0
    if left < needed_s:
        time.sleep(left + 0.1)


def client(system: System, address: str) -> httpx.Client:
    """Requests as if from ``address`` (through the trusted local proxy)."""
    return httpx.Client(base_url=system.url(), timeout=30, headers={"X-Forwarded-For": address})


def test_headers_on_every_response_then_429_with_retry_after(limited: System) -> None:
    within_one_window()
    with client(limited, "198.51.100.1") as c:
        remaining = []
        for path in ["/v1/public", "/v1/users/nobody", "/v1/users?usernames=a", "/public", "/v1/public?limit=0"] * 2:
            r = c.get(path)
            assert r.status_code != 429, path
            assert all(h in r.headers for h in HEADERS), (path, dict(r.headers))
            assert r.headers["RateLimit-Limit"] == "12"
            assert 0 < int(r.headers["RateLimit-Reset"]) <= 60
            remaining.append(int(r.headers["RateLimit-Remaining"]))
        assert remaining == list(range(11, 1, -1))  # 10 requests: 11 .. 2 left
        statuses = [c.get("/v1/public").status_code for _ in range(4)]
        assert statuses == [200, 200, 429, 429]
        r = c.post("/v1/users", json={"username": "late", "password": PASSWORD})
        assert r.status_code == 429
        assert r.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(r.headers["Retry-After"]) <= 60
        assert r.headers["RateLimit-Remaining"] == "0" and all(h in r.headers for h in HEADERS)
        # Operations routes are never limited.
        assert c.get("/healthz").status_code == 200 and c.get("/openapi.json").status_code == 200
    with client(limited, "198.51.100.2") as other:
        assert other.get("/v1/public").status_code == 200  # another address has its own budget


def test_forwarded_for_is_believed_only_from_a_trusted_proxy(limited: System) -> None:
    """Loopback is the trusted proxy here, so a client's own X-Forwarded-For
    hop is the address counted; but what the client wrote further left is
    not believed: spoofing a fresh address per request does not help."""
    within_one_window()
    with client(limited, "198.51.100.3") as c:
        for i in range(12):
            r = c.get("/v1/public", headers={"X-Forwarded-For": f"203.0.113.{i}, 198.51.100.3"})
            assert r.status_code == 200
        r = c.get("/v1/public", headers={"X-Forwarded-For": "203.0.113.99, 198.51.100.3"})
        assert r.status_code == 429


def test_authenticated_requests_count_per_user(limited: System) -> None:
    address = "198.51.100.4"
    within_one_window(30.0)  # the sign-ups count too: all of it in one minute
    with client(limited, address) as c:
        names = []
        for prefix in ("rl", "rm"):
            api = Api(limited.url())
            api.http.headers["X-Forwarded-For"] = address
            names.append(api.user(prefix))
            api.close()
        (alice, alice_token), (_, bob_token) = names
        while c.get("/v1/public").status_code != 429:
            pass  # spend the address
        me = {"Authorization": f"Bearer {alice_token}"}
        r = c.get("/v1/timeline", headers=me)
        assert r.status_code == 200, r.text
        assert r.headers["RateLimit-Limit"] == "20"  # alice's own budget, not the address's
        # A forged token in alice's name does not spend her budget: it counts
        # against the (spent) address.
        forged = {"Authorization": f"Bearer {alice.lower()}.forged-secret"}
        assert c.get("/v1/timeline", headers=forged).status_code == 429
        left = int(c.get("/v1/public", headers=me).headers["RateLimit-Remaining"])
        codes = [c.get("/v1/public", headers=me).status_code for _ in range(left + 2)]
        assert codes[:left] == [200] * left and codes[-1] == 429
        # bob, from the same address, is not affected by alice spending hers.
        assert c.get("/v1/timeline", headers={"Authorization": f"Bearer {bob_token}"}).status_code == 200


def test_failed_logins_are_limited_per_username_and_per_address(limited: System) -> None:
    api = Api(limited.url())
    api.http.headers["X-Forwarded-For"] = "198.51.100.5"
    victim = api.sign_up(api.unique_name("vi"))
    api.close()
    # Per username: three failures from three addresses spend the name...
    within_one_window()
    for i in range(3):
        with client(limited, f"192.0.2.{i}") as c:
            r = c.post("/v1/sessions", json={"username": victim, "password": "wrong password"})
            assert r.status_code == 401, r.text
    with client(limited, "192.0.2.50") as c:
        r = c.post("/v1/sessions", json={"username": victim.upper(), "password": PASSWORD})
        assert r.status_code == 429, r.text  # ...so even the right password waits
        assert r.json()["error"]["code"] == "rate_limited" and int(r.headers["Retry-After"]) >= 1
        # The web sign-in form is the same use case, so the same limit.
        page = c.get("/login")
        csrf = page.cookies["fanline_csrf"]
        r = c.post("/login", data={"username": victim, "password": PASSWORD, "csrf": csrf}, cookies={"fanline_csrf": csrf})
        assert r.status_code == 429
    # Per address: four failures for four different names spend the address.
    within_one_window()
    with client(limited, "192.0.2.77") as c:
        for i in range(4):
            assert c.post("/v1/sessions", json={"username": f"nobody{i}", "password": "x" * 8}).status_code == 401
        r = c.post("/v1/sessions", json={"username": "someone_else", "password": "x" * 8})
        assert r.status_code == 429


# --- argon2 memory budget -------------------------------------------------------------------

BUDGET_MIB = 128  # two 64 MiB hashes at a time
SLACK_MIB = 40  # allocator and interpreter noise around the hashes


def vm_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


@pytest.fixture
def production_argon2(tmp_path: Path) -> Iterator[System]:
    """The production argon2 profile (64 MiB, t=3, p=4), a 128 MiB budget
    and a short queue: the settings under test."""
    system = make_system(
        "embedded",
        19850,  # clear of the first system's metrics ports (19700 + 50 ...)
        tmp_path,
        FANLINE_ARGON2_TIME_COST="3",
        FANLINE_ARGON2_MEMORY_KIB="65536",
        FANLINE_ARGON2_PARALLELISM="4",
        FANLINE_ARGON2_MEMORY_BUDGET_MIB=str(BUDGET_MIB),
        FANLINE_ARGON2_QUEUE_WAIT_S="0.3",
        # The hashes that get a slot must finish as 401 however slow the
        # cores: in CI's first phase, beside the soak and the cluster's
        # start, the flood ended after 5.2 s with all 40 answers 503, the
        # hashing ones at the 5 s deadline. That deadline is not what this
        # test is about; the budget and the queue's refusals are.
        FANLINE_PASSWORD_REQUEST_TIMEOUT_S="60",
        FANLINE_PEER_TIMEOUT_S="60",
    )
    system.start()
    yield system
    system.stop()


def test_a_login_flood_stays_within_the_argon2_memory_budget(production_argon2: System) -> None:
    system = production_argon2
    pid = system.procs["social-graph"].pid
    Api(system.url()).sign_up("flooded")  # one hash at rest: the process's steady state
    time.sleep(0.5)
    before_kib = vm_kib(pid, "VmRSS")

    async def flood() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=system.url(), timeout=60) as c:
            return await asyncio.gather(
                *(c.post("/v1/sessions", json={"username": f"nobody{i:03d}", "password": "wrong password"}) for i in range(40))
            )

    started = time.monotonic()
    responses = asyncio.run(flood())
    elapsed = time.monotonic() - started
    peak_kib = vm_kib(pid, "VmHWM")
    statuses = sorted(r.status_code for r in responses)
    print(
        f"\n40 parallel failed logins in {elapsed:.1f}s: {statuses.count(401)} x 401, "
        f"{statuses.count(503)} x 503; social-graph RSS {before_kib / 1024:.0f} MiB before, "
        f"peak {peak_kib / 1024:.0f} MiB (budget {BUDGET_MIB} MiB)"
    )
    assert set(statuses) <= {401, 503}, statuses
    assert statuses.count(401) >= 2 and statuses.count(503) >= 1, statuses
    for r in responses:
        if r.status_code == 503:
            assert r.json()["error"]["code"] == "unavailable" and int(r.headers["Retry-After"]) >= 1
    assert (peak_kib - before_kib) / 1024 <= BUDGET_MIB + SLACK_MIB, (before_kib, peak_kib)
