"""``fanline migrate`` where the storage services are not installed (the api
image ships the CLI without them): a clear refusal, not a traceback."""

from __future__ import annotations

import importlib.util

import pytest

from fanline_cli.__main__ import main


def test_migrate_without_the_storage_packages_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fanline_tweet_store" else real(name, *a))
    assert main(["migrate", "--service", "tweet-store"], environ={}) == 2
    err = capsys.readouterr().err
    assert "fanline-cli[migrate]" in err and "tweet-store" in err
