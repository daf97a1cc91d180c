"""The native protocol version is a setting: v4 unless v5 is asked for."""

from __future__ import annotations

import pytest

from fanline_shared.config import ConfigError, Env, StorageSettings


def test_protocol_defaults_to_v4() -> None:
    assert StorageSettings.from_env(Env({})).protocol_version == 4


def test_protocol_v5_on_request() -> None:
    assert StorageSettings.from_env(Env({"FANLINE_CASSANDRA_PROTOCOL": "5"})).protocol_version == 5


def test_unknown_protocol_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="FANLINE_CASSANDRA_PROTOCOL"):
        StorageSettings.from_env(Env({"FANLINE_CASSANDRA_PROTOCOL": "3"}))
