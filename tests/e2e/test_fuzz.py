"""The OpenAPI document matches the server, and no request produces a 500.

Schemathesis generates requests from the gateway's own ``/openapi.json`` —
examples, boundary values, valid and deliberately invalid parameters, bodies
and headers, plus stateful sequences (create a user, use it) — and runs
**every** check on every response: status codes, headers and bodies as
documented, schema-valid requests accepted and schema-violating ones refused,
``Allow`` on 405, authentication not ignored, and of course no 5xx. At least
2,000 cases on the embedded system, authenticated as a real user; fewer on
the real engines (Cassandra rejects different inputs than SQLite, so a 500
could hide on either). Settings that the document cannot state live in the
repository's ``schemathesis.toml`` (the opaque, signed paging cursor).

Three runs, so that nothing undoes the others: every operation but log-out
with a long-lived token; the follow/unfollow operations with ``{username}``
fixed to the token's own user (else every case is a 403); log-out with a
token of its own. A fourth run covers the live streams, whose ``200`` never
ends: only schema-violating requests (``--mode negative``), each of which
must be refused -- fast, since an accepted one would hang until the request
timeout. (It found an empty ``Last-Event-ID`` accepted while the document
said uuid; the document now says what the server does: empty means "not
resuming", issue #29.)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.local.system import System

from .client import Api
from .conftest import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
CONFIG = REPO / "schemathesis.toml"
FOLLOW = "/v1/users/{username}/following/{target}"
LOGOUT = "/v1/sessions/current"


def schemathesis(api: Api, tmp: Path, token: str, examples: int, *args: str, config: Path = CONFIG, streams: bool = False) -> int:
    """Run schemathesis with every check; return how many cases it generated
    (failing the test on any failure)."""
    result = subprocess.run(
        [
            str(SCHEMATHESIS),
            "--config-file",
            str(config),
            "run",
            f"{api.base_url}/openapi.json",
            "--checks",
            "all",
            "--max-examples",
            str(examples),
            "--workers",
            "1",  # hypothesis' lambda-source parsing is not thread-safe on 3.11
            "--seed",
            "20261125",
            "--header",
            f"Authorization: Bearer {token}",
            "--request-timeout",
            # A stream's 200 never ends, so it cannot be fuzzed like a request:
            # only its refusals are (``streams``: schema-violating cases, each
            # refused well within 5 s, or it times out and fails); its answers
            # are covered by tests/e2e/test_streaming.py.
            "5" if streams else "30",
            *(
                ("--include-path-regex", "^/v1/streaming/", "--mode", "negative")
                if streams
                else ("--exclude-path-regex", "^/v1/streaming/")
            ),
            "--output-truncate",
            "false",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp,
    )
    output = result.stdout + result.stderr
    failures = output.split("FAILURES")[-1][:12000] if "FAILURES" in output else output[-12000:]
    assert result.returncode == 0, failures
    summary = output.split("SUMMARY")[-1]
    assert "failure" not in summary.replace("0 failures", ""), output[-12000:]
    found = re.search(r"(\d+) generated", summary)
    assert found, output[-4000:]
    return int(found.group(1))


def test_openapi_document_matches_the_server(system: System, api: Api, tmp_path: Path) -> None:
    embedded = system.backend == "embedded"
    me, token = api.user("fz")
    cases = schemathesis(api, tmp_path, token, 110 if embedded else 15, "--exclude-path", LOGOUT)

    own = tmp_path / "own-account.toml"
    own.write_text(
        CONFIG.read_text() + f'\n[[operations]]\ninclude-path = "{FOLLOW}"\nparameters = {{ "path.username" = "{me}" }}\n'
    )
    cases += schemathesis(api, tmp_path, token, 30, "--include-path", FOLLOW, config=own)

    _, throwaway = api.user("fzout")
    cases += schemathesis(api, tmp_path, throwaway, 20, "--include-path", LOGOUT)
    refusals = schemathesis(api, tmp_path, token, 40, streams=True)
    cases += refusals
    print(f"\nschemathesis, every check: {cases} cases ({refusals} stream refusals), 0 failures ({system.backend})")
    if embedded:
        assert cases >= 2000, cases
