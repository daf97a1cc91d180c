"""Fixtures of the operations tests (dashboards, alerts, Kubernetes, CLI).

``ops_system`` is one embedded Fanline (SQLite + tansu, as `make run`) on its
own ports (base 21000; its broker on 32092), started once for this
directory. The real-engine variant of the dashboard test starts its own on
base 21100 against the shared real engines (``real_infra``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deploy.local.system import System
from e2e.conftest import make_system

OPS_BASE_PORT = 21000
OPS_REAL_BASE_PORT = 21100


@pytest.fixture(scope="session")
def ops_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    system = make_system("embedded", OPS_BASE_PORT, tmp_path_factory.mktemp("ops-embedded"))
    system.start()
    yield system
    system.stop()
