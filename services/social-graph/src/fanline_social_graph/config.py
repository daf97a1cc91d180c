"""social-graph settings, resolved once from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fanline_shared.config import Env, HttpSettings, StorageSettings, admission_policy, internal_token
from fanline_shared.policies import SOCIAL_GRAPH_ADMISSION, AdmissionPolicy


@dataclass(frozen=True)
class Settings:
    http: HttpSettings
    storage: StorageSettings
    session_ttl_s: int
    argon2_time_cost: int
    argon2_memory_kib: int
    argon2_parallelism: int
    inactive_after_s: float
    # Memory all concurrent argon2 hashes may use together (MiB); the number
    # of hashes at once is this divided by FANLINE_ARGON2_MEMORY_KIB.
    argon2_memory_budget_mib: int
    # How long a log-in or sign-up may wait for a free slot before 503.
    argon2_queue_wait_s: float
    internal_token: str | None = field(repr=False)  # a secret: never in a repr (or a log line)
    admission: AdmissionPolicy = SOCIAL_GRAPH_ADMISSION

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        env = Env(environ)
        return cls(
            http=HttpSettings.from_env(env, "SOCIAL_GRAPH", 8001),
            storage=StorageSettings.from_env(env),
            session_ttl_s=env.integer("FANLINE_SESSION_TTL_S", 30 * 24 * 3600, minimum=60),
            # argon2-cffi's RFC 9106 "low memory" profile by default.
            argon2_time_cost=env.integer("FANLINE_ARGON2_TIME_COST", 3, minimum=1),
            argon2_memory_kib=env.integer("FANLINE_ARGON2_MEMORY_KIB", 65536, minimum=8),
            argon2_parallelism=env.integer("FANLINE_ARGON2_PARALLELISM", 4, minimum=1),
            # A user with no authenticated request for this long is skipped by
            # the fan-out and their home timeline regenerated when they return.
            inactive_after_s=env.number("FANLINE_INACTIVE_AFTER_S", 7 * 24 * 3600, positive=True),
            argon2_memory_budget_mib=env.integer("FANLINE_ARGON2_MEMORY_BUDGET_MIB", 256, minimum=1),
            argon2_queue_wait_s=env.number("FANLINE_ARGON2_QUEUE_WAIT_S", 2.0),
            internal_token=internal_token(env),
            admission=admission_policy(env, SOCIAL_GRAPH_ADMISSION),
        )
