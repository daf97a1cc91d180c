"""The fan-out worker's logging honours ``FANLINE_LOG_LEVEL``: faust's own
worker, at WARN or above, set the root logger to DEBUG for its terminal
spinner, so every library's debug record was built (and spun the spinner)."""

from __future__ import annotations

import logging
from pathlib import Path

import faust
import pytest

from fanline_fanout.__main__ import Worker
from fanline_fanout.app import create_app
from fanline_fanout.config import Settings
from fanline_shared import logs


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    root.handlers[:] = handlers


def _set_up(worker_class: type[faust.Worker], tmp_path: Path) -> None:
    settings = Settings.from_env({"FANLINE_DATA_DIR": str(tmp_path), "FANLINE_INTERNAL_TOKEN": "t" * 32})
    app = create_app(settings)
    worker = worker_class(
        app, loglevel="warning", logging_config=logs.logging_config("fanout-worker", "json", "WARNING"), redirect_stdouts=False
    )
    worker._setup_logging()  # what the worker does first when it starts


def test_the_worker_keeps_the_configured_level(tmp_path: Path, restore_logging: None) -> None:
    _set_up(Worker, tmp_path)
    root = logging.getLogger()
    assert root.level == logging.WARNING
    assert not logging.getLogger("fanline_fanout.handlers").isEnabledFor(logging.INFO)
    assert not logging.getLogger("mode").isEnabledFor(logging.DEBUG)


def test_fausts_own_worker_would_lower_it(tmp_path: Path, restore_logging: None) -> None:
    """Why ``Worker`` exists: if faust stops doing this, the subclass can go."""
    _set_up(faust.Worker, tmp_path)
    assert logging.getLogger().level == logging.DEBUG
