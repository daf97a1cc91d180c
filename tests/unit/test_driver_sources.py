"""cassandra-driver's request path runs from its Python sources in the storage
services, its row decoders stay compiled (fanline_shared.driver_sources)."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import fanline_tweet_store.__main__  # the entry point: the storage-service kit, then the app
import cassandra.cluster, cassandra.cython_deps, cassandra.protocol, cassandra.row_parser
from fanline_shared import driver_sources
print(json.dumps({
    "sources": driver_sources.loaded_from_sources(),
    "files": {name: sys.modules[name].__file__ for name in sorted(driver_sources.SOURCE_MODULES) if name in sys.modules},
    "row_parser": cassandra.row_parser.__file__,
    "cython": cassandra.cython_deps.HAVE_CYTHON,
    "handler": cassandra.protocol.ProtocolHandler.__name__,
}))
"""


def probe(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_storage_service_loads_the_request_path_from_sources() -> None:
    seen = probe(PROBE)
    assert seen["sources"] is True
    assert "cassandra.cluster" in seen["files"] and "cassandra.connection" in seen["files"]
    assert all(path.endswith(".py") for path in seen["files"].values()), seen["files"]
    # The typed row decoders are still the compiled ones, and the protocol uses them.
    assert seen["row_parser"].endswith(".so")
    assert seen["cython"] is True
    assert seen["handler"] == "CythonProtocolHandler"


def test_without_the_finder_the_wheel_build_loads_and_prefer_sources_says_it_came_too_late() -> None:
    seen = probe(
        "import json, cassandra.cluster\n"
        "from fanline_shared import driver_sources\n"
        "print(json.dumps({'late': driver_sources.prefer_sources(), 'file': cassandra.cluster.__file__}))"
    )
    assert seen["file"].endswith(".so")
    assert seen["late"] is False
