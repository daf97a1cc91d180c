"""``fanline rebuild-home USERNAME``: rebuild one home timeline.

A home timeline is derived data: the user's own tweets plus the tweets of
everyone they follow. This walks the follow graph through social-graph's
internal API (``GET /internal/users/{u}/following``, paged) and asks
tweet-store to merge each author's recent tweets into the user's timeline
(``POST /internal/home/{owner}/merge``) -- the same call the worker makes on
``Followed``. Merging is an idempotent upsert keyed by tweet id, so running
it on an intact timeline changes nothing, and it is safe while the worker
runs.

Bounds: each author contributes their newest ``FANLINE_FOLLOW_MERGE_COUNT``
tweets (tweet-store's setting, default 200) younger than the home retention
(30 days); older tweets stay reachable through userlines. Rows of authors
the user no longer follows are not removed (the worker's ``Unfollowed``
handling does that).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from fanline_shared.clients.social_graph import SocialGraphClient
from fanline_shared.clients.tweet_store import TweetStoreClient
from fanline_shared.config import PeerSettings

SERVICE = "fanline-cli"
# The services the CLI constructs peer clients for: its call
# paths. deploy/k8s/base/networkpolicy.yaml admits exactly these, and
# tests/ops/test_k8s.py derives the policies' callers from this list (and
# checks it against the clients this package constructs).
PEERS: tuple[str, ...] = ("social-graph", "tweet-store")


@dataclass(frozen=True)
class RebuildResult:
    username: str
    authors: int  # followees plus the user
    merged: int  # timeline rows (re)written


async def following(social: SocialGraphClient, username: str, page_size: int) -> list[str]:
    """Every account ``username`` follows, through the paged internal API."""
    names: list[str] = []
    after: str | None = None
    while True:
        page = await social.edges(username, "following", page_size, after)
        names += [item["username"] for item in page["items"]]
        after = page.get("next")
        if not after:
            return names


async def rebuild_home(peers: PeerSettings, username: str, *, page_size: int = 1000, concurrency: int = 8) -> RebuildResult:
    social = SocialGraphClient(SERVICE, peers.social_graph_url, peers.timeout_s, token=peers.internal_token)
    tweets = TweetStoreClient(SERVICE, peers.tweet_store_url, peers.timeout_s, token=peers.internal_token)
    try:
        owner = str((await social.get_user(username))["username"])  # canonical spelling; NotFound if none
        authors = [owner, *await following(social, owner, page_size)]
        gate = asyncio.Semaphore(concurrency)

        async def merge(author: str) -> int:
            async with gate:
                return await tweets.home_merge(owner, author)

        merged = await asyncio.gather(*(merge(a) for a in authors))
        return RebuildResult(owner, len(authors), sum(merged))
    finally:
        await social.close()
        await tweets.close()
