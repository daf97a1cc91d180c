"""What the caller of a fan-out write declares to the adaptive limit
(``limiter.AdaptiveLimit``), as context variables of the task doing it.

``page_budget``: the page's caller waits this long. A page is refused up
front (``PageRefused``) if the writes queued ahead of it would not let it
finish within ``PAGE_ADMIT_SHARE`` of that, and its window is widened so its
own round trips take at most ``PAGE_ROUNDS_SHARE`` of it.

Two classes share the limit. Writes made inside ``bulk_writes()`` — the
slices of a large fan-out, marked by the worker (``http_client.BULK``) — take a
slot only when no ordinary write is waiting, and never the last slot of the
limit: an ordinary author's page waits behind at most the bulk writes already
in flight, however many million rows are queued behind it. Without this, a
1,000,000-follower fan-out shares the limit by arrival with everybody else
and every other author's delivery slows to its pace (issue 13: "one author's
fan-out never delays another author's delivery").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

# Whether the writes of the current task (and the tasks it starts) are bulk.
_BULK: ContextVar[bool] = ContextVar("fanline_bulk_writes", default=False)
# The time the current page's caller gives it (seconds; None: no budget).
_BUDGET: ContextVar[float | None] = ContextVar("fanline_page_budget", default=None)
# Of a page's budget: the share its own round trips may take (its window is
# widened to fit), and the share the writes queued ahead of it plus its own
# may take at the current pace before it is refused without starting.
PAGE_ROUNDS_SHARE = 0.25
PAGE_ADMIT_SHARE = 0.5


class PageRefused(Exception):
    """A page that could not be written within its budget at the current
    pace, refused before any of it was written (the caller backs off and
    sends it again)."""

    def __init__(self, expected_s: float, budget_s: float) -> None:
        super().__init__(
            f"about {expected_s:.1f} s of fan-out writes are queued here for a budget of {budget_s:.1f} s"
            if expected_s != float("inf")
            else "the first page here is still being timed"
        )
        self.expected_s = expected_s
        self.budget_s = budget_s


@contextlib.contextmanager
def page_budget(seconds: float) -> Iterator[None]:
    """Every ``AdaptiveLimit.write_all`` inside this block is a page its
    caller waits ``seconds`` for: it is refused up front (``PageRefused``)
    if the writes queued here would not let it finish in time, and its
    window is widened so its own round trips fit (see ``write_all``)."""
    token = _BUDGET.set(seconds)
    try:
        yield
    finally:
        _BUDGET.reset(token)


@contextlib.contextmanager
def bulk_writes() -> Iterator[None]:
    """Every ``AdaptiveLimit`` write started inside this block is bulk: it
    yields to ordinary writes (see the module docstring)."""
    token = _BULK.set(True)
    try:
        yield
    finally:
        _BULK.reset(token)


def is_bulk() -> bool:
    """Whether the current task's writes are bulk (``bulk_writes``)."""
    return _BULK.get()


def current_budget() -> float | None:
    """The current page's budget in seconds (``page_budget``; None: none)."""
    return _BUDGET.get()
