"""``HomeWrites``: how tweet-store writes home-timeline rows — one settings
object from the environment (``config.py``) to both storage adapters."""

from __future__ import annotations

from dataclasses import dataclass, field

from fanline_shared import policies

from .limiter import LimitPolicy


@dataclass(frozen=True)
class HomeWrites:
    """Rows expire ``retention_s`` after their tweet was created (both
    backends). In Cassandra a fan-out page is written as requests — unlogged
    batches of up to ``batch_rows`` rows whose partitions share their first
    replica (1: single-row inserts) — at most ``page_window`` of them in
    flight per page, every request of the process under one adaptive limit
    (``limiter.AdaptiveLimit``, tuned by ``limit``)."""

    retention_s: int
    page_window: int = policies.DEFAULT_HOME_WRITE_WINDOW
    batch_rows: int = policies.DEFAULT_HOME_WRITE_BATCH_ROWS
    limit: LimitPolicy = field(default_factory=LimitPolicy)

    def __post_init__(self) -> None:
        if self.retention_s <= 0:
            raise ValueError("retention_s must be positive")
