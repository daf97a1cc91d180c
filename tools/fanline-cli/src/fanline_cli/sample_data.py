"""``fanline sample-data``: a Twissandra-style generator, through the public API.

Twissandra shipped a script that filled a fresh install with users who
follow each other at random and tweet random sentences, so the timelines
had something to show. This does the same against a running Fanline, using
only the public HTTP API (so it also exercises the outbox, Kafka and the
fan-out worker exactly like real clients): sign up N users, log each in,
make each follow K random others, post M tweets each, interleaved so home
timelines mix authors. Requests run concurrently (``--concurrency``) with a
progress bar on stderr; 429 and 503 answers are retried after Retry-After.
Users that already exist (a re-run with the same ``--prefix``) are logged in
and reused, provided the password matches.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from tqdm import tqdm

T = TypeVar("T")

WORDS = (
    "cassandra kafka timeline tweet follow fan out partition replica worker latency "
    "coffee morning deploy rollback graph python starlette faust lag offset event "
    "idempotent bucket minute cluster node quorum write read page cursor hello world "
    "today tomorrow shipping weekend metrics grafana dashboard alert pager quiet happy"
).split()
RETRY_STATUSES = (429, 503)


class SampleDataError(RuntimeError):
    """The API refused a request for a reason retrying will not fix."""


@dataclass
class SampleResult:
    usernames: list[str]
    password: str
    follows: int = 0
    tweets: int = 0
    requests: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        rate = self.requests / self.seconds if self.seconds else 0.0
        first = self.usernames[0] if self.usernames else "-"
        return (
            f"{len(self.usernames)} users, {self.follows} follows, {self.tweets} tweets: "
            f"{self.requests} requests in {self.seconds:.1f}s ({rate:.0f}/s). "
            f"Log in as {first!r} with password {self.password!r}."
        )


def sentence(rng: random.Random) -> str:
    words = rng.choices(WORDS, k=rng.randint(4, 16))
    return (" ".join(words).capitalize() + rng.choice(".!?"))[:280]


def usernames(prefix: str, count: int) -> list[str]:
    width = len(str(max(count - 1, 0)))
    names = [f"{prefix}{i:0{width}d}" for i in range(count)]
    if names and len(names[-1]) > 15:
        raise SampleDataError(f"usernames like {names[-1]!r} exceed 15 characters: use a shorter --prefix")
    return names


def follow_plan(names: list[str], per_user: int, rng: random.Random) -> list[tuple[str, str]]:
    """``per_user`` distinct random followees for every user (never themselves)."""
    per_user = min(per_user, len(names) - 1)
    plan = []
    for i, name in enumerate(names):
        others = names[:i] + names[i + 1 :]
        plan += [(name, target) for target in rng.sample(others, per_user)]
    return plan


class PublicApi:
    def __init__(self, base_url: str, concurrency: int, timeout_s: float = 30.0) -> None:
        self.requests = 0
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def call(
        self, method: str, path: str, *, json: Any = None, token: str | None = None, accept: Iterable[int] = (200, 201, 204)
    ) -> httpx.Response:
        headers = {"authorization": f"Bearer {token}"} if token else {}
        for attempt in range(8):
            try:
                response = await self._client.request(method, path, json=json, headers=headers)
            except httpx.TransportError as exc:
                if attempt == 7:
                    raise SampleDataError(f"{method} {path}: {exc!r}") from None
                await asyncio.sleep(min(0.2 * 2**attempt, 5.0))
                continue
            self.requests += 1
            if response.status_code in RETRY_STATUSES and attempt < 7:
                retry_after = response.headers.get("retry-after", "")
                await asyncio.sleep(float(retry_after) if retry_after.isdigit() else min(0.2 * 2**attempt, 5.0))
                continue
            if response.status_code not in accept:
                raise SampleDataError(f"{method} {path} -> {response.status_code}: {response.text[:300]}")
            return response
        raise AssertionError("unreachable")


async def pool(items: list[T], work: Callable[[T], Awaitable[None]], concurrency: int, bar: tqdm[Any]) -> None:
    """Run ``work`` on every item, ``concurrency`` at a time, ticking the bar."""
    it = iter(items)

    async def worker() -> None:
        for item in it:  # a shared iterator: each item is taken once
            await work(item)
            bar.update(1)

    await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))


async def generate(
    api_url: str,
    *,
    users: int,
    follows_per_user: int,
    tweets_per_user: int,
    prefix: str,
    password: str,
    concurrency: int = 16,
    seed: int | None = None,
    progress: bool = True,
) -> SampleResult:
    rng = random.Random(seed)
    names = usernames(prefix, users)
    plan = follow_plan(names, follows_per_user, rng)
    posts = [(name, sentence(rng)) for _ in range(tweets_per_user) for name in names]
    result = SampleResult(usernames=names, password=password)
    tokens: dict[str, str] = {}
    api = PublicApi(api_url, concurrency)
    started = time.monotonic()
    total = 2 * len(names) + len(plan) + len(posts)
    bar = tqdm(total=total, unit="req", desc="sign up", disable=not progress, dynamic_ncols=True)
    try:

        async def sign_up(name: str) -> None:
            await api.call("POST", "/v1/users", json={"username": name, "password": password}, accept=(201, 409))

        async def log_in(name: str) -> None:
            response = await api.call("POST", "/v1/sessions", json={"username": name, "password": password})
            tokens[name] = response.json()["token"]

        async def follow(edge: tuple[str, str]) -> None:
            follower, target = edge
            await api.call("PUT", f"/v1/users/{follower}/following/{target}", token=tokens[follower])
            result.follows += 1

        async def post(item: tuple[str, str]) -> None:
            name, body = item
            await api.call("POST", "/v1/tweets", json={"body": body}, token=tokens[name])
            result.tweets += 1

        await pool(names, sign_up, concurrency, bar)
        bar.set_description("log in")
        await pool(names, log_in, concurrency, bar)
        bar.set_description("follow")
        await pool(plan, follow, concurrency, bar)
        bar.set_description("tweet")
        await pool(posts, post, concurrency, bar)
        bar.set_description("done")
    finally:
        bar.close()
        await api.close()
        result.requests = api.requests
        result.seconds = time.monotonic() - started
    return result
