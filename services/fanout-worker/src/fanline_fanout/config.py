"""fan-out worker settings, resolved once from the environment."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fanline_shared.colocation import hosted_services
from fanline_shared.config import HttpSettings, KafkaSettings, PeerSettings
from fanline_shared.env_settings import EnvSettings, env_field, env_float, env_int, env_str

DEFAULT_LARGE_ACCOUNT_FOLLOWERS = 10_000


@dataclass(frozen=True, kw_only=True)
class Settings(EnvSettings):
    http: HttpSettings = env_field(lambda env: HttpSettings.from_env(env, "WORKER", 8003))
    kafka: KafkaSettings = env_field(KafkaSettings.from_env)
    peers: PeerSettings = env_field(PeerSettings.from_env)
    group_id: str = env_str("FANLINE_WORKER_GROUP", "fanline-fanout")
    # Followers fetched per page and written per tweet-store call.
    follower_page_size: int = env_int("FANLINE_FANOUT_PAGE_SIZE", 1000, minimum=1)
    # Pages being written while the next page is fetched.
    pages_in_flight: int = env_int("FANLINE_FANOUT_PAGES_IN_FLIGHT", 4, minimum=1)
    # Events processed at once, per agent (one lane per author, each in
    # order; see pipeline.OrderedPipeline). The name is from when they were
    # taken in batches.
    batch_size: int = env_int("FANLINE_FANOUT_BATCH", 16, minimum=1)
    # An event failing with an unexpected (non-transient) error this many
    # times goes to the dead-letter topic.
    max_unexpected_attempts: int = env_int("FANLINE_FANOUT_MAX_ATTEMPTS", 5, minimum=1)
    commit_interval_s: float = env_float("FANLINE_COMMIT_INTERVAL_S", 1.0, positive=True)
    # A fetch is answered once the broker has this many bytes for it, or
    # after the wait (offsets.BatchedFetchThread): a trickle of events
    # arrives a few per fetch, at most the wait later. Measured in alternating
    # 150 s `mixed` runs against faust's own (1 byte, 1,500 ms): the worker
    # -23 % CPU per request, the whole system -10 %; delivery lag p50 +50 ms,
    # p99 ~240 ms; idle, the worker and Kafka +1.3 % of a core (10 empty
    # fetches a second). FANLINE_WORKER_FETCH_MIN_BYTES=1: faust's way.
    fetch_min_bytes: int = env_int("FANLINE_WORKER_FETCH_MIN_BYTES", 65536, minimum=1)
    fetch_max_wait_ms: int = env_int("FANLINE_WORKER_FETCH_MAX_WAIT_MS", 100, minimum=0)
    # A killed worker's partitions move to the others after the session
    # timeout. The embedded broker also makes a joining member wait the whole
    # rebalance timeout, so keep it short.
    session_timeout_s: float = env_float("FANLINE_WORKER_SESSION_TIMEOUT_S", 10.0, positive=True)
    rebalance_timeout_s: float = env_float("FANLINE_WORKER_REBALANCE_TIMEOUT_S", 5.0, positive=True)
    # /readyz fails if there is lag but nothing was processed this long.
    stuck_after_s: float = env_float("FANLINE_WORKER_STUCK_AFTER_S", 120.0, positive=True)
    # faust keeps a small directory of its own (table metadata); without this
    # it would be created in the current directory.
    data_dir: Path = env_field(lambda env: Path(env.string("FANLINE_DATA_DIR", ".data")).resolve() / "fanout-worker")
    # Authors with at least this many followers are merged into home
    # timelines at read time instead of fanned out on write;
    # FANLINE_HYBRID_FANOUT=false fans every author out on write.
    large_account_followers: int | None = env_field(
        lambda env: (
            env.integer("FANLINE_LARGE_ACCOUNT_FOLLOWERS", DEFAULT_LARGE_ACCOUNT_FOLLOWERS, minimum=1)
            if env.boolean("FANLINE_HYBRID_FANOUT", True)
            else None
        )
    )
    # Followers written per slice of a fan-out: past the first slice, the
    # rest go to the chunks topic as independently scheduled slices, so one
    # large fan-out never holds up other authors.
    chunk_size: int = env_int("FANLINE_FANOUT_CHUNK", 5000, minimum=1)
    # Slices written at once per worker (each with pages_in_flight pages):
    # enough to keep tweet-store busy with bulk writes, few enough that the
    # pages queued there stay well inside a page's budget (16 slices x 4
    # pages x 1,000 rows queue ~4 s of writes).
    slices_in_flight: int = env_int("FANLINE_FANOUT_SLICES_IN_FLIGHT", 4, minimum=1)
    # FANLINE_HOSTED_SERVICES: the stores this worker writes through run in
    # its own process (the role of the fan-out replicas, without their
    # processes and HTTP; fanline_shared.colocation.Hosting).
    hosted_services: tuple[str, ...] = env_field(hosted_services)
