"""Followers in pages, and pages written with a bounded number in flight.

The fan-out handlers (``handlers.py``) read a tweet's recipients from
social-graph page by page and write each page through tweet-store; while up
to ``pages_in_flight`` pages are being written, the next one is read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fanline_shared import metrics
from fanline_shared.clients.social_graph import SocialGraphClient
from fanline_shared.domain import canonical
from fanline_shared.errors import NotFound


class FollowerPages:
    """An author's followers from social-graph, ``page_size`` names a page."""

    def __init__(self, social: SocialGraphClient, *, page_size: int, pages_in_flight: int) -> None:
        self._social = social
        self._page_size = page_size
        self._in_flight = pages_in_flight

    async def for_each(
        self,
        author: str,
        action: Callable[[list[str]], Awaitable[None]],
        *,
        first_page: Awaitable[dict[str, Any]] | None = None,
        with_author: bool = False,
        direction: str = "followers",
        max_followers: int | None = None,
        first_alone: bool = False,
    ) -> str | None:
        """Page through the followers, running ``action`` on each page with
        up to ``pages_in_flight`` pages being written while the next is read.
        ``first_page``: the first page, already being fetched; ``with_author``:
        the author is added to the first page (written even with no followers).
        With ``max_followers``, stop after about that many and return where
        the rest starts (None: every follower was done). ``first_alone``: the
        first page's ``action`` completes before any other starts (it checks
        what the others rely on). Any failure propagates after the in-flight
        pages settle."""
        pages = PagesInFlight(action, self._in_flight)
        after: str | None = None
        done = 0
        try:
            while True:
                try:
                    if first_page is not None:
                        page, first_page = await first_page, None
                    else:
                        page = await self._social.edges(author, direction, self._page_size, after)
                except NotFound:
                    break  # the author no longer exists
                names = [item["username"] for item in page["items"]]
                done += len(names)
                if with_author:
                    names.insert(0, author)
                    with_author = False
                if first_alone:
                    first_alone = False
                    await pages.add(names)
                    await pages.finish()
                else:
                    await pages.add(names)
                after = page.get("next")
                if not after:
                    break
                if max_followers is not None and done >= max_followers:
                    await pages.finish()
                    return str(after)
            await pages.finish()
            return None
        finally:
            await pages.cancel()

    async def run(self, pages: list[list[str]], action: Callable[[list[str]], Awaitable[None]]) -> None:
        """Run ``action`` on each page, ``pages_in_flight`` at a time."""
        runner = PagesInFlight(action, self._in_flight)
        try:
            for page in pages:
                await runner.add(page)
            await runner.finish()
        finally:
            await runner.cancel()

    async def names(self, author: str, after: str, limit: int, *, until: str | None = None) -> tuple[list[str], str | None]:
        """Up to ``limit`` active followers after ``after`` (and at most
        ``until``), and where the next slice starts if more remain."""
        names: list[str] = []
        cursor: str | None = after
        while len(names) < limit:
            try:
                page = await self._social.edges(author, "followers-active", min(self._page_size, limit - len(names)), cursor)
            except NotFound:
                return names, None
            items = [item["username"] for item in page["items"]]
            if until is not None:
                items = [n for n in items if canonical(n) <= canonical(until)]
            names.extend(items)
            cursor = page.get("next")
            if not cursor or (until is not None and len(items) < len(page["items"])):
                return names, None
        return names, (canonical(names[-1]) if until is None else None)


class PagesInFlight:
    """Pages being written, at most ``limit`` at once; failures surface at
    the next ``add`` or at ``finish``."""

    def __init__(self, action: Callable[[list[str]], Awaitable[None]], limit: int) -> None:
        self._action = action
        self._limit = limit
        self._tasks: set[asyncio.Task[None]] = set()

    async def _timed(self, page: list[str]) -> None:
        started = time.perf_counter()
        await self._action(page)
        metrics.FANOUT_PAGE_DURATION.observe(time.perf_counter() - started)

    async def add(self, page: list[str]) -> None:
        if page:
            self._tasks.add(asyncio.create_task(self._timed(page)))
        if len(self._tasks) >= self._limit:
            done, self._tasks = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
            _raise_first_error(done)

    async def finish(self) -> None:
        while self._tasks:
            done, self._tasks = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
            _raise_first_error(done)

    async def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = set()


def _raise_first_error(done: set[asyncio.Task[None]]) -> None:
    """Retrieve every finished page's outcome (so none is reported as "never
    retrieved"), then raise the first failure."""
    errors = [exc for task in done if (exc := task.exception()) is not None]
    if errors:
        raise errors[0]
