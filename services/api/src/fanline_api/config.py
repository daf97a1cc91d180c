"""Gateway settings, resolved once from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fanline_shared.config import Env, HttpSettings, KafkaSettings, PeerSettings
from fanline_shared.policies import GATEWAY_PASSWORD_REQUEST, GATEWAY_REQUEST, RequestDeadline

# Only for laptops and tests: production must set FANLINE_CURSOR_SECRET (the
# same value on every gateway replica) so cursors verify across replicas.
DEV_CURSOR_SECRET = "fanline-dev-cursor-secret-change-me"


@dataclass(frozen=True)
class LiveSettings:
    """Live streams (api.md "Live updates"); see live.py."""

    enabled: bool  # off: no event tap, the stream routes answer 503
    heartbeat_s: float  # a comment line this often (api.md: at most 15 s)
    max_streams_per_user: int  # per gateway replica
    follow_refresh_s: float  # re-read open streams' following lists this often

    @classmethod
    def from_env(cls, env: Env) -> LiveSettings:
        return cls(
            enabled=env.boolean("FANLINE_STREAMING", True),
            heartbeat_s=min(env.number("FANLINE_STREAM_HEARTBEAT_S", 15.0, positive=True), 15.0),
            max_streams_per_user=env.integer("FANLINE_STREAMS_PER_USER", 4, minimum=1),
            follow_refresh_s=env.number("FANLINE_STREAM_FOLLOW_REFRESH_S", 300.0, positive=True),
        )


@dataclass(frozen=True)
class Settings:
    http: HttpSettings
    kafka: KafkaSettings
    peers: PeerSettings
    cursor_secret: bytes
    relay_interval_s: float
    relay_stale_after_ms: int
    rate_limit_per_s: float
    rate_limit_burst: int
    ensure_topics: bool
    live: LiveSettings
    request_deadline: RequestDeadline = GATEWAY_REQUEST
    password_deadline: RequestDeadline = GATEWAY_PASSWORD_REQUEST

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        env = Env(environ)
        return cls(
            http=HttpSettings.from_env(env, "API", 8000),
            kafka=KafkaSettings.from_env(env),
            peers=PeerSettings.from_env(env),
            cursor_secret=env.string("FANLINE_CURSOR_SECRET", DEV_CURSOR_SECRET).encode(),
            relay_interval_s=env.number("FANLINE_RELAY_INTERVAL_S", 1.0, positive=True),
            relay_stale_after_ms=env.integer("FANLINE_RELAY_STALE_AFTER_MS", 3000, minimum=0),
            # Per client address; 0 disables rate limiting.
            rate_limit_per_s=env.number("FANLINE_RATE_LIMIT_PER_S", 0.0),
            rate_limit_burst=env.integer("FANLINE_RATE_LIMIT_BURST", 100, minimum=1),
            ensure_topics=env.boolean("FANLINE_ENSURE_TOPICS", True),
            request_deadline=RequestDeadline(
                GATEWAY_REQUEST.name,
                env.number("FANLINE_REQUEST_TIMEOUT_S", GATEWAY_REQUEST.seconds, positive=True)),
            password_deadline=RequestDeadline(
                GATEWAY_PASSWORD_REQUEST.name,
                env.number("FANLINE_PASSWORD_REQUEST_TIMEOUT_S", GATEWAY_PASSWORD_REQUEST.seconds, positive=True)),
            live=LiveSettings.from_env(env),
        )
