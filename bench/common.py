"""What the whole benchmark shares: the run's size (``Plan``: ``QUICK`` and
``FULL``), the constants of the isolated system, progress on stderr
(``say``, elapsed since import) and the authors spread over the events
topic's partitions (``balanced_authors``)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from . import results

GROUPS = results.FOLLOWER_COUNTS
PASSWORD = "bench-author-pw"
RETENTION_S = 30 * 24 * 3600
PARTITIONS = 8

# Cheap argon2 for the accounts the harness creates (as the e2e tests do):
# posting and reading never hash, only sign-up and log-in do.
SYSTEM_ENV = {
    "FANLINE_ARGON2_TIME_COST": "1",
    "FANLINE_ARGON2_MEMORY_KIB": "8192",
    "FANLINE_ARGON2_PARALLELISM": "1",
    "FANLINE_LOG_LEVEL": "WARNING",
    "FANLINE_KAFKA_IDEMPOTENCE": "true",
    # The push-path phases (post latency at up to 10,000 followers, the
    # fan-out ceiling, scaling, delivery lag) measure fan-out on write, which
    # the default large-account threshold (10,000) would turn off at 10k.
    "FANLINE_HYBRID_FANOUT": "false",
}


@dataclass(frozen=True)
class Plan:
    """How much of everything a run does."""

    mode: str
    posts_per_group: int  # ours, per follower count
    sync_posts: tuple[int, int, int, int]  # baseline, per follower count
    post_gap_s: float
    backlog_authors: int
    backlog_followers: int
    backlog_tweets: int
    tune_rows: int
    tune_concurrencies: tuple[int, ...]
    stress_ops: int
    stress_threads: int
    lag_authors: int
    lag_rate: float
    lag_duration_s: float
    lag_sweep_rates: tuple[float, ...]
    lag_sweep_duration_s: float
    read_rate: float
    read_block_s: float
    read_blocks: int
    readers: int
    profile_s: int
    drain_timeout_s: float
    # celebrity (issue 13): follower counts, posts per count and mode, the
    # ordinary authors posting meanwhile, and the home-read sub-phase
    celebrity_counts: tuple[int, ...]
    celebrity_posts: int
    celebrity_gap_s: float
    ordinary_authors: int
    ordinary_followers: int
    ordinary_rate: float
    ordinary_min_s: float
    read_large_counts: tuple[int, ...]
    read_large_threshold: int
    read_large_readers: int
    # latency-bound scaling (issue 13)
    scale_tweets: int
    scale_delay_ms: float
    scale_counts: tuple[int, ...]
    # live streams (phases/streams.py): concurrent home streams on one gateway
    streams: int = 1000
    stream_rate: float = 5.0
    stream_duration_s: float = 60.0
    stream_idle_s: float = 30.0
    # the open-loop mixed workload (issue 18; openloop.py, workload.py)
    open_users: int = 300
    open_mean_following: int = 15
    mixed_rate: float = 60.0
    mixed_s: float = 300.0
    sat_start: float = 25.0
    sat_factor: float = 1.5
    sat_steps: int = 10
    sat_step_s: float = 30.0
    overload_s: float = 60.0
    embedded_users: int = 100
    embedded_rate: float = 20.0
    embedded_s: float = 120.0
    # issue 18: every headline ratio this many times, interleaved; the post
    # phase's samples per side and round (>= 300 for a p99 in a full run);
    # delivery lag with reads running; readers with distinct follow sets
    repeats: int = 3
    post_samples: int = 300
    lag_reads_rate: float = 5.0
    lag_reads_duration_s: float = 60.0
    lag_reads_per_s: float = 100.0
    read_authors: int = 20
    reader_follows: int = 5
    read_author_tweets: int = 10
    # Authors of the latency-scaling backlog (0: the backlog authors). Each
    # worker needs more distinct authors than its event slots
    # (FANLINE_FANOUT_BATCH, 16): events of one author run in order.
    scale_authors: int = 0


# Sized for a 2-core machine shared with other jobs, where one Cassandra node
# takes roughly 10k writes/s: the full run takes about a quarter of an hour.
QUICK = Plan(
    mode="quick",
    posts_per_group=12,
    sync_posts=(12, 12, 12, 6),
    post_gap_s=0.05,
    backlog_authors=8,
    backlog_followers=2000,
    backlog_tweets=16,
    tune_rows=4000,
    tune_concurrencies=(16, 64),
    stress_ops=30_000,
    stress_threads=64,
    lag_authors=4,
    lag_rate=0.5,
    lag_duration_s=16,
    lag_sweep_rates=(2.0,),
    lag_sweep_duration_s=8,
    read_rate=20,
    read_block_s=3,
    read_blocks=3,
    readers=10,
    profile_s=10,
    drain_timeout_s=600,
    celebrity_counts=(1000, 10_000, 50_000),
    celebrity_posts=3,
    celebrity_gap_s=1.0,
    ordinary_authors=10,
    ordinary_followers=100,
    ordinary_rate=1.0,
    ordinary_min_s=8,
    read_large_counts=(0, 10, 100),
    read_large_threshold=100,
    read_large_readers=4,
    scale_tweets=24,
    scale_delay_ms=5.0,
    scale_counts=(1, 2, 4, 1),
    streams=100,
    stream_duration_s=10,
    stream_idle_s=16,
    open_users=40,
    open_mean_following=5,
    mixed_rate=20,
    mixed_s=15,
    sat_start=20,
    sat_factor=2.0,
    sat_steps=3,
    sat_step_s=8,
    overload_s=10,
    embedded_users=20,
    embedded_rate=10,
    embedded_s=10,
    post_samples=12,
    lag_reads_duration_s=8,
    lag_reads_per_s=20,
    read_authors=8,
    reader_follows=3,
    read_author_tweets=8,
)
FULL = Plan(
    mode="full",
    posts_per_group=300,
    sync_posts=(100, 100, 100, 50),
    post_gap_s=0.05,
    backlog_authors=64,
    backlog_followers=2000,
    backlog_tweets=50,
    tune_rows=20000,
    tune_concurrencies=(8, 16, 32, 64, 128),
    stress_ops=100_000,
    stress_threads=64,
    lag_authors=4,
    lag_rate=0.5,
    lag_duration_s=120,
    lag_sweep_rates=(2.0, 4.0),
    lag_sweep_duration_s=60,
    read_rate=40,
    read_block_s=10,
    read_blocks=3,
    readers=20,
    profile_s=30,
    drain_timeout_s=3600,
    celebrity_counts=(1000, 10_000, 100_000, 1_000_000),
    celebrity_posts=5,
    celebrity_gap_s=1.0,
    ordinary_authors=10,
    ordinary_followers=100,
    ordinary_rate=1.0,
    ordinary_min_s=20,
    read_large_counts=(0, 10, 100),
    read_large_threshold=100,
    read_large_readers=10,
    scale_tweets=256,
    scale_delay_ms=200.0,
    scale_counts=(1, 2, 4, 1),
    scale_authors=256,
)


class BenchError(RuntimeError):
    pass


# --- progress ------------------------------------------------------------------------------

_T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[bench +{time.monotonic() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# --- small helpers -----------------------------------------------------------------------


def partition_of(key: str, partitions: int = PARTITIONS) -> int:
    from aiokafka.partitioner import DefaultPartitioner

    return int(DefaultPartitioner()(key.encode(), list(range(partitions)), list(range(partitions))))


def balanced_authors(tag: str, count: int, stem: str = "b") -> list[str]:
    """``count`` author names spread evenly over the events topic's partitions
    (key = the lower-cased author), so 1, 2 and 4 workers get equal shares."""
    per = max(1, count // PARTITIONS)
    chosen: list[str] = []
    used: dict[int, int] = {}
    k = 0
    while len(chosen) < count:
        name = f"a{tag}{stem}{k:03d}"
        k += 1
        p = partition_of(name)
        if used.get(p, 0) < per or k > 5000:
            used[p] = used.get(p, 0) + 1
            chosen.append(name)
    return chosen
