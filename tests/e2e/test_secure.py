"""TLS and authentication to both engines, end to end (issue #29 item 3).

A pair of engines of its own, started by the project's launcher the way
``make infra-up SECURE=1`` does (``.infra-secure/``, ports 9242/9292): Kafka
with only TLS listeners, clients authenticating with SASL SCRAM-SHA-512
(users added when the storage was formatted; the services also present a
client certificate, which Kafka verifies); Cassandra with
``client_encryption_options`` and ``PasswordAuthenticator`` (the launcher
created the services' role and replaced the default superuser's password). The whole
system runs against them with the settings ``infra env`` prints (passwords
as ``*_FILE``):

* sign-up → post → fan-out → home read, and a live stream (the gateway's
  event tap is a Kafka consumer of its own), all through TLS and SASL;
* the ``fanline`` CLI (topics, dead letters, migrations) through them too;
* refused, through the project's own client code: a wrong password (Kafka
  and Cassandra), a plaintext client, a client that does not trust the
  engines' CA (verification is never skipped);
* no password in any service's log, nor in any settings ``repr``.

Runs in the single-node stage of ``make test`` (marker ``real_infra``) on
engines of its own, stopped at the module's end; see docs/reliability.md for
what it costs.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.local.system import System

from .client import Api, eventually
from .conftest import ARTIFACTS, REPO, make_system
from .sse import Listener

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.real_infra]
VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class SecureInfra:
    control: Any  # deploy/local/infra LocalInfra, secure
    cassandra_contact: str
    kafka_bootstrap: str
    env: dict[str, str]  # the services' settings for these engines (`infra env`)
    started_s: float


@pytest.fixture(scope="module")
def secure_infra() -> Iterator[SecureInfra]:
    from deploy.local import infra as module

    state = os.environ.get("FANLINE_SECURE_INFRA_DIR", "").strip() or str(REPO / ".infra-secure")
    local = module.LocalInfra(module.InfraConfig.from_env(secure=True, state_dir=state))
    try:
        local.check_prerequisites()
    except module.InfraUnavailable as exc:
        if os.environ.get("REQUIRE_REAL_INFRA", "").strip().lower() in {"1", "true", "yes", "on"}:
            raise
        pytest.skip(f"real infrastructure unavailable: {exc}")
    already = local.is_running()
    started = time.monotonic()
    local.start()
    elapsed = time.monotonic() - started
    print(f"\nsecure engines: {'reused' if already else f'started in {elapsed:.0f} s'} ({local.startup_seconds})")
    try:
        yield SecureInfra(local, local.cassandra_contact, local.kafka_bootstrap, local.settings_env(), elapsed)
    finally:
        if not already and os.environ.get("FANLINE_KEEP_INFRA", "").strip().lower() not in {"1", "true", "yes", "on"}:
            local.stop()


@pytest.fixture(scope="module")
def secure_system(secure_infra: SecureInfra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    system = make_system("real", 24200, tmp_path_factory.mktemp("secure"), secure_infra, **secure_infra.env)
    started = time.monotonic()
    system.start(timeout=240)
    print(f"secure system ready in {time.monotonic() - started:.0f} s")
    yield system
    system.stop()


def passwords(infra: SecureInfra) -> dict[str, str]:
    material = infra.control.kafka.material
    return {
        name: material.password(name)
        for name in ("kafka-fanline", "kafka-admin", "cassandra-fanline", "cassandra-admin", "store")
    }


def test_sign_up_post_fan_out_home_read_and_a_live_stream_through_tls_and_auth(secure_system: System) -> None:
    api = Api(secure_system.url())
    try:
        author, author_token = api.user("tls")
        fan, fan_token = api.user("fan")
        api.follow(fan_token, fan, author)
        first = api.post(author_token, "through TLS and SCRAM")
        eventually(lambda: first["id"] in api.home_ids(fan_token), timeout=60, what="the fan-out through TLS")
        stream = Listener(secure_system.url() + "/v1/streaming/home", {"Authorization": f"Bearer {fan_token}"})
        try:
            assert stream.status == 200, stream.body
            second = api.post(author_token, "live, through the event tap")
            stream.wait("update", second["id"], timeout=30)
        finally:
            stream.close()
        assert [t["id"] for t in api.page(f"/v1/users/{author}/tweets")["items"]] == [second["id"], first["id"]]
    finally:
        api.close()


def test_the_cli_reaches_both_engines_through_tls_and_auth(secure_system: System) -> None:
    def fanline(*args: str) -> str:
        done = subprocess.run(
            [str(VENV_BIN / "fanline"), *args], env=secure_system.env(), capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, f"fanline {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    assert "replication factor 1, ok" in fanline("topics", "verify")
    fanline("dlq", "inspect")
    assert "tweet-store: schema up to date (cassandra)" in fanline("migrate", "--service", "tweet-store")


def test_a_wrong_password_a_plaintext_client_and_an_unverified_server_are_refused(
    secure_infra: SecureInfra, secure_system: System, caplog: pytest.LogCaptureFixture
) -> None:
    from fanline_shared.cassandra import open_session
    from fanline_shared.config import Env, KafkaSettings, StorageSettings
    from fanline_shared.errors import Unavailable
    from fanline_shared.kafka import ensure_topics

    env = secure_system.env()

    def kafka(**changes: str | None) -> Exception:
        settings = KafkaSettings.from_env(Env({k: v for k, v in {**env, **changes}.items() if v is not None}))
        with pytest.raises(Unavailable) as refused:
            asyncio.run(ensure_topics(settings, timeout_s=15))
        return refused.value

    def cassandra(**changes: str | None) -> Exception:
        settings = StorageSettings.from_env(Env({k: v for k, v in {**env, **changes}.items() if v is not None}))
        with pytest.raises(Unavailable) as refused:
            asyncio.run(open_session(settings))
        return refused.value

    # The same settings do connect: what follows fails for the one change only.
    asyncio.run(ensure_topics(KafkaSettings.from_env(Env(env)), timeout_s=30))

    wrong = {"FANLINE_KAFKA_PASSWORD_FILE": None, "FANLINE_KAFKA_PASSWORD": "not-the-password"}
    caplog.clear()
    kafka(**wrong)
    # aiokafka logs why it could not bootstrap (the services' logs show it too).
    assert "SaslAuthenticationFailed" in caplog.text, "a wrong SCRAM password"
    kafka(FANLINE_KAFKA_SECURITY_PROTOCOL="PLAINTEXT")
    caplog.clear()
    refused = kafka(FANLINE_KAFKA_TLS_CA=None)  # the system's trust store: the engines' CA is not in it
    assert "CERTIFICATE_VERIFY_FAILED" in (caplog.text + str(refused)).upper(), caplog.text[-2000:]

    wrong = {"FANLINE_CASSANDRA_PASSWORD_FILE": None, "FANLINE_CASSANDRA_PASSWORD": "not-the-password"}
    assert "uthentication" in str(cassandra(**wrong)), "a wrong Cassandra password"
    cassandra(FANLINE_CASSANDRA_TLS="false")
    assert "CERTIFICATE_VERIFY_FAILED" in str(cassandra(FANLINE_CASSANDRA_TLS_CA=None)).upper()
    # The default superuser's well-known password no longer works either.
    cassandra(
        FANLINE_CASSANDRA_USERNAME="cassandra", FANLINE_CASSANDRA_PASSWORD_FILE=None, FANLINE_CASSANDRA_PASSWORD="cassandra"
    )


def test_no_password_is_logged_or_shown_in_a_settings_repr(secure_infra: SecureInfra, secure_system: System) -> None:
    from fanline_api.config import Settings as ApiSettings
    from fanline_fanout.config import Settings as WorkerSettings
    from fanline_social_graph.config import Settings as SocialGraphSettings
    from fanline_tweet_store.config import Settings as TweetStoreSettings

    secrets = passwords(secure_infra)
    env = {**secure_system.env(), "FANLINE_KAFKA_PASSWORD_FILE": "", "FANLINE_KAFKA_PASSWORD": secrets["kafka-fanline"]}
    for settings in (ApiSettings, WorkerSettings, SocialGraphSettings, TweetStoreSettings):
        shown = repr(settings.from_env(env))
        assert not [name for name, value in secrets.items() if value in shown], settings
        assert secure_system.internal_token not in shown
    logs = sorted((ARTIFACTS / "logs").glob(f"real-{secure_system.base_port}-*/*.log"))
    assert logs, "the system's logs"
    for log in logs:
        text = log.read_text(errors="replace")
        assert not [name for name, value in secrets.items() if value in text], log
