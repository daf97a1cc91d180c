"""Gateway settings, resolved once from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fanline_shared.colocation import hosted_services
from fanline_shared.config import (
    ConfigError,
    Env,
    HttpSettings,
    KafkaSettings,
    PeerSettings,
    admission_policy,
    is_production,
    looks_like_placeholder,
)
from fanline_shared.policies import (
    GATEWAY_ADMISSION,
    GATEWAY_PASSWORD_REQUEST,
    GATEWAY_REQUEST,
    AdmissionPolicy,
    RequestDeadline,
)

from .ratelimit import RateLimitSettings
from .sessions import DEFAULT_MAX_AGE_S as DEFAULT_SESSION_CACHE_S

# Only for laptops and tests: production must set FANLINE_CURSOR_SECRET (the
# same value on every gateway replica) so cursors verify across replicas.
# With FANLINE_ENV=production the gateway refuses to start without one.
DEV_CURSOR_SECRET = "fanline-dev-cursor-secret-change-me"
CURSOR_SECRET_MIN = 32


def cursor_secret(env: Env) -> bytes:
    """FANLINE_CURSOR_SECRET: HMAC key of the paging cursors and of the web
    pages' CSRF tokens. The development default is public (it is in this
    file), so production refuses it, any placeholder, and short values. Also
    read from the file ``FANLINE_CURSOR_SECRET_FILE`` names."""
    secret = env.secret("FANLINE_CURSOR_SECRET")
    value = secret.get_secret_value() if secret is not None else DEV_CURSOR_SECRET
    if is_production(env):
        if value == DEV_CURSOR_SECRET or looks_like_placeholder(value):
            raise ConfigError(
                "FANLINE_CURSOR_SECRET is the development value or a placeholder; production "
                "(FANLINE_ENV=production) needs a random one, e.g. openssl rand -hex 32"
            )
        if len(value) < CURSOR_SECRET_MIN:
            raise ConfigError(f"FANLINE_CURSOR_SECRET must be at least {CURSOR_SECRET_MIN} characters in production")
    return value.encode()


@dataclass(frozen=True)
class LiveSettings:
    """Live streams (api.md "Live updates"); see stream_hub.py."""

    enabled: bool  # off: no event tap, the stream routes answer 503
    heartbeat_s: float  # a comment line this often (api.md: at most 15 s)
    max_streams_per_user: int  # per gateway replica
    follow_refresh_s: float  # re-read open streams' following lists this often

    @classmethod
    def from_env(cls, env: Env) -> LiveSettings:
        return cls(
            enabled=env.boolean("FANLINE_STREAMING", True),
            heartbeat_s=min(env.number("FANLINE_STREAM_HEARTBEAT_S", 12.0, positive=True), 14.0),
            max_streams_per_user=env.integer("FANLINE_STREAMS_PER_USER", 4, minimum=1),
            follow_refresh_s=env.number("FANLINE_STREAM_FOLLOW_REFRESH_S", 300.0, positive=True),
        )


def public_url(env: Env) -> str | None:
    """FANLINE_PUBLIC_URL: the URL clients reach this server at (behind a
    proxy, say), used in the Mastodon-compatible API's links, account and
    status URLs; unset, each request's own scheme and host."""
    value = env.string("FANLINE_PUBLIC_URL", "").rstrip("/")
    if not value:
        return None
    if not value.startswith(("http://", "https://")) or " " in value:
        raise ConfigError(f"FANLINE_PUBLIC_URL must be an http(s) URL, got {value!r}")
    return value


@dataclass(frozen=True)
class Settings:
    http: HttpSettings
    kafka: KafkaSettings
    peers: PeerSettings
    cursor_secret: bytes = field(repr=False)  # a secret: never in a repr (or a log line)
    relay_interval_s: float
    relay_read_s: float  # how often the relay reads the outboxes (default: three intervals)
    relay_stale_after_ms: int
    relay_lease_s: int
    rate_limits: RateLimitSettings
    ensure_topics: bool
    live: LiveSettings
    # /readyz fails while Kafka is down (FANLINE_READY_REQUIRES_KAFKA); by
    # default it only reports Kafka as degraded: posts wait in the outbox.
    ready_requires_kafka: bool = False
    public_url: str | None = None
    registrations: bool = True  # FANLINE_REGISTRATIONS: may anyone sign up?
    account_cache_s: float = 5.0  # how old the counts shown in a status's account may be
    session_cache_s: float = DEFAULT_SESSION_CACHE_S
    request_deadline: RequestDeadline = GATEWAY_REQUEST
    password_deadline: RequestDeadline = GATEWAY_PASSWORD_REQUEST
    admission: AdmissionPolicy = GATEWAY_ADMISSION
    hosted_services: tuple[str, ...] = ()  # FANLINE_HOSTED_SERVICES: each on its own port, calls in the process

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        env = Env(environ)
        relay_interval_s = env.number("FANLINE_RELAY_INTERVAL_S", 1.0, positive=True)
        return cls(
            http=HttpSettings.from_env(env, "API", 8000),
            kafka=KafkaSettings.from_env(env),
            peers=PeerSettings.from_env(env),
            cursor_secret=cursor_secret(env),
            relay_interval_s=relay_interval_s,
            relay_read_s=env.number("FANLINE_RELAY_READ_S", 3 * relay_interval_s, positive=True),
            relay_stale_after_ms=env.integer("FANLINE_RELAY_STALE_AFTER_MS", 3000, minimum=0),
            relay_lease_s=env.integer("FANLINE_RELAY_LEASE_S", 10, minimum=2),
            rate_limits=RateLimitSettings.from_env(env),
            ensure_topics=env.boolean("FANLINE_ENSURE_TOPICS", True),
            request_deadline=RequestDeadline(
                GATEWAY_REQUEST.name, env.number("FANLINE_REQUEST_TIMEOUT_S", GATEWAY_REQUEST.seconds, positive=True)
            ),
            password_deadline=RequestDeadline(
                GATEWAY_PASSWORD_REQUEST.name,
                env.number("FANLINE_PASSWORD_REQUEST_TIMEOUT_S", GATEWAY_PASSWORD_REQUEST.seconds, positive=True),
            ),
            live=LiveSettings.from_env(env),
            ready_requires_kafka=env.boolean("FANLINE_READY_REQUIRES_KAFKA", False),
            public_url=public_url(env),
            registrations=env.boolean("FANLINE_REGISTRATIONS", True),
            account_cache_s=env.number("FANLINE_ACCOUNT_CACHE_S", 5.0),
            session_cache_s=env.number("FANLINE_SESSION_CACHE_S", DEFAULT_SESSION_CACHE_S),
            admission=admission_policy(env, GATEWAY_ADMISSION),
            hosted_services=hosted_services(env),
        )
