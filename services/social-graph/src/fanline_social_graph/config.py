"""social-graph settings, resolved once from the environment."""

from __future__ import annotations

from dataclasses import dataclass

from fanline_shared.env_settings import env_float, env_int
from fanline_shared.policies import SOCIAL_GRAPH_ADMISSION
from fanline_shared.storage_service.settings import StorageServiceSettings


@dataclass(frozen=True, kw_only=True)
class Settings(StorageServiceSettings):
    SERVICE = "social-graph"
    PORT = 8001
    ADMISSION = SOCIAL_GRAPH_ADMISSION

    session_ttl_s: int = env_int("FANLINE_SESSION_TTL_S", 30 * 24 * 3600, minimum=60)
    # argon2-cffi's RFC 9106 "low memory" profile by default.
    argon2_time_cost: int = env_int("FANLINE_ARGON2_TIME_COST", 3, minimum=1)
    argon2_memory_kib: int = env_int("FANLINE_ARGON2_MEMORY_KIB", 65536, minimum=8)
    argon2_parallelism: int = env_int("FANLINE_ARGON2_PARALLELISM", 4, minimum=1)
    # A user with no authenticated request for this long is skipped by the
    # fan-out and their home timeline regenerated when they return.
    inactive_after_s: float = env_float("FANLINE_INACTIVE_AFTER_S", 7 * 24 * 3600, positive=True)
    # Memory all concurrent argon2 hashes may use together (MiB); the number
    # of hashes at once is this divided by FANLINE_ARGON2_MEMORY_KIB.
    argon2_memory_budget_mib: int = env_int("FANLINE_ARGON2_MEMORY_BUDGET_MIB", 256, minimum=1)
    # How long a log-in or sign-up may wait for a free slot before 503.
    argon2_queue_wait_s: float = env_float("FANLINE_ARGON2_QUEUE_WAIT_S", 2.0)
    # OAuth tokens (the Mastodon-compatible API) last this long; 0: until revoked, as Mastodon's.
    oauth_token_ttl_s: int = env_int("FANLINE_OAUTH_TOKEN_TTL_S", 0, minimum=0)
