"""Env's typed reads: a present but unusable value is a ConfigError naming the
variable, never a silently odd setting (a negative timeout, a NaN rate)."""

from __future__ import annotations

import pytest

from fanline_shared.config import ConfigError, Env, KafkaSettings, PeerSettings
from fanline_tweet_store.config import Settings as TweetStoreSettings


def test_number_reads_defaults_and_values() -> None:
    env = Env({"A": " 2.5 ", "Z": "0"})
    assert env.number("A", 1.0) == 2.5
    assert env.number("MISSING", 1.0) == 1.0
    assert env.number("Z", 1.0) == 0.0  # 0 is "off" where a setting allows it


@pytest.mark.parametrize("raw", ["-1", "-0.5", "nan", "inf", "-inf", "ten"])
def test_number_rejects_negative_non_finite_and_text(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"^X "):
        Env({"X": raw}).number("X", 1.0)


def test_positive_number_rejects_zero() -> None:
    with pytest.raises(ConfigError, match="X must be positive"):
        Env({"X": "0"}).number("X", 1.0, positive=True)


@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("FANLINE_PEER_TIMEOUT_S", PeerSettings.from_env),
        ("FANLINE_KAFKA_TIMEOUT_S", KafkaSettings.from_env),
    ],
)
def test_timeouts_must_be_positive(name: str, build: object) -> None:
    with pytest.raises(ConfigError, match=name):
        build(Env({name: "0"}))  # type: ignore[operator]


@pytest.mark.parametrize("name", ["FANLINE_FANOUT_BUSY_TOLERANCE", "FANLINE_FANOUT_IDLE_TOLERANCE"])
def test_fanout_limit_tolerances_must_be_positive(tmp_path: object, name: str) -> None:
    base = {"FANLINE_DATA_DIR": str(tmp_path)}
    assert TweetStoreSettings.from_env({**base, name: "2.5"}).home.limit is not None
    for bad in ("0", "-1"):
        with pytest.raises(ConfigError, match=name):
            TweetStoreSettings.from_env({**base, name: bad})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FANLINE_HOME_MAX_ROWS", "9"),
        ("FANLINE_LARGE_ACCOUNT_FOLLOWERS", "0"),
    ],
)
def test_small_thresholds_have_a_floor(tmp_path: object, name: str, value: str) -> None:
    from fanline_fanout.config import Settings as WorkerSettings

    build = WorkerSettings.from_env if name == "FANLINE_LARGE_ACCOUNT_FOLLOWERS" else TweetStoreSettings.from_env
    with pytest.raises(ConfigError, match=name):
        build({"FANLINE_DATA_DIR": str(tmp_path), name: value})


def test_outbox_ack_applied_needs_the_embedded_backend() -> None:
    assert KafkaSettings.from_env(Env({})).outbox_ack == "broker"
    assert KafkaSettings.from_env(Env({"FANLINE_OUTBOX_ACK": "applied"})).ack_when_applied
    with pytest.raises(ConfigError, match="FANLINE_OUTBOX_ACK"):
        KafkaSettings.from_env(Env({"FANLINE_OUTBOX_ACK": "applied", "FANLINE_BACKEND": "cassandra"}))
    with pytest.raises(ConfigError, match="FANLINE_OUTBOX_ACK"):
        KafkaSettings.from_env(Env({"FANLINE_OUTBOX_ACK": "sometimes"}))
