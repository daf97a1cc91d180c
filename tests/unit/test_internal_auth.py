"""Service-to-service authentication (shared/internal_auth.py) and the
production refusal of development secrets (issue #15).

Every ``/internal`` route of social-graph and tweet-store, whatever its
method, answers ``401 internal_unauthorized`` without the credential or with
a wrong one, before any handler or storage is touched; the operations routes
stay open. The same holds end to end in tests/e2e/test_abuse.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from fanline_shared.config import ConfigError, Env, PeerSettings
from fanline_shared.internal_auth import HEADER

TOKEN = "unit-test-internal-token-0123456789"


def _apps(tmp_path: Path, token: str | None) -> Iterator[tuple[str, Any]]:
    from fanline_social_graph.app import create_app as social_graph
    from fanline_social_graph.config import Settings as SocialGraphSettings
    from fanline_tweet_store.app import create_app as tweet_store
    from fanline_tweet_store.config import Settings as TweetStoreSettings

    env = {
        "FANLINE_DATA_DIR": str(tmp_path),
        "FANLINE_ARGON2_MEMORY_KIB": "64",
        "FANLINE_ARGON2_TIME_COST": "1",
        "FANLINE_ARGON2_PARALLELISM": "1",
    }
    if token:
        env["FANLINE_INTERNAL_TOKEN"] = token
    yield "social-graph", social_graph(SocialGraphSettings.from_env(env))
    yield "tweet-store", tweet_store(TweetStoreSettings.from_env(env))


def internal_routes(app: Any) -> list[tuple[str, str]]:
    out = []
    for route in app.routes:
        if isinstance(route, Route) and route.path.startswith("/internal"):
            path = (
                route.path.replace("{username}", "alice")
                .replace("{target}", "bob")
                .replace("{tweet_id}", "1044da6b-e61b-11f1-9151-88a70954b0ca")
            )
            out += [(method, path) for method in sorted(route.methods or ()) if method != "HEAD"]
    return out


@pytest.mark.parametrize("presented", [None, "", "wrong-token-wrong-token-wrong", TOKEN[:-1], TOKEN + "x"])
def test_every_internal_route_refuses_a_missing_or_wrong_credential(tmp_path: Path, presented: str | None) -> None:
    for service, app in _apps(tmp_path, TOKEN):
        routes = internal_routes(app)
        assert len(routes) >= 10, (service, routes)
        headers = {HEADER: presented} if presented is not None else {}
        with TestClient(app, headers=headers) as client:
            for method, path in routes:
                r = client.request(method, path, json={})
                assert r.status_code == 401, (service, method, path, r.status_code)
                assert r.json()["error"]["code"] == "internal_unauthorized"
            assert client.get("/healthz").status_code == 200  # probes need no credential
            # /metrics: on the metrics port only (http_server.MetricsPort), never here.
            assert client.get("/metrics").status_code == 404


def test_the_right_credential_is_let_through(tmp_path: Path) -> None:
    for service, app in _apps(tmp_path, TOKEN):
        with TestClient(app, headers={HEADER: TOKEN}) as client:
            for method, path in internal_routes(app):
                r = client.request(method, path, json={})
                assert r.status_code < 500, (service, method, path, r.text)
                code = r.json()["error"]["code"] if r.status_code >= 400 else None
                assert code != "internal_unauthorized", (service, method, path)
            path = "/internal/users/nobody" if service == "social-graph" else "/internal/public"
            assert client.get(path).status_code in (200, 404)


def test_a_service_without_a_credential_refuses_everyone(tmp_path: Path) -> None:
    """Fail closed: no FANLINE_INTERNAL_TOKEN is not "open to all"."""
    for _, app in _apps(tmp_path, None):
        with TestClient(app, headers={HEADER: "anything-anything-anything"}) as client:
            assert client.get("/internal/public").status_code == 401
            assert client.get("/internal/users/alice").status_code == 401


def test_credential_setting_rules() -> None:
    assert PeerSettings.from_env(Env({})).internal_token is None
    assert PeerSettings.from_env(Env({"FANLINE_INTERNAL_TOKEN": TOKEN})).internal_token == TOKEN
    with pytest.raises(ConfigError, match="FANLINE_INTERNAL_TOKEN"):
        PeerSettings.from_env(Env({"FANLINE_INTERNAL_TOKEN": "short"}))
    with pytest.raises(ConfigError, match="FANLINE_INTERNAL_TOKEN"):
        PeerSettings.from_env(Env({"FANLINE_INTERNAL_TOKEN": "has a space in it, not a header"}))


# --- production refuses development secrets ------------------------------------------------

GOOD = {
    "FANLINE_ENV": "production",
    "FANLINE_INTERNAL_TOKEN": "9f8e7d6c5b4a39281706f5e4d3c2b1a0",
    "FANLINE_CURSOR_SECRET": "0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f6071",
}


def _settings_classes() -> list[Any]:
    from fanline_api.config import Settings as Api
    from fanline_fanout.config import Settings as Worker
    from fanline_social_graph.config import Settings as SocialGraph
    from fanline_tweet_store.config import Settings as TweetStore

    return [Api, Worker, SocialGraph, TweetStore]


def test_production_starts_with_real_secrets() -> None:
    for cls in _settings_classes():
        cls.from_env(GOOD)


@pytest.mark.parametrize(
    "change",
    [
        {"FANLINE_INTERNAL_TOKEN": ""},
        {"FANLINE_INTERNAL_TOKEN": "REPLACE-ME-with-openssl-rand-hex-32"},
        {"FANLINE_INTERNAL_TOKEN": "fanline-dev-overlay-internal-token-not-for-production"},
    ],
)
def test_production_refuses_a_missing_or_placeholder_credential(change: dict[str, str]) -> None:
    for cls in _settings_classes():
        with pytest.raises(ConfigError, match="FANLINE_INTERNAL_TOKEN"):
            cls.from_env({**GOOD, **change})


@pytest.mark.parametrize(
    "secret",
    [
        "",
        "fanline-dev-cursor-secret-change-me",
        "REPLACE-ME-with-openssl-rand-hex-32",
        "fanline-dev-overlay-cursor-secret-not-for-production",
        "short-but-random-9f8e",
    ],
)
def test_production_refuses_the_development_cursor_secret(secret: str) -> None:
    from fanline_api.config import Settings

    with pytest.raises(ConfigError, match="FANLINE_CURSOR_SECRET"):
        Settings.from_env({**GOOD, "FANLINE_CURSOR_SECRET": secret})
    Settings.from_env({**GOOD, "FANLINE_CURSOR_SECRET": secret, "FANLINE_ENV": "development"})


def test_the_gateway_process_refuses_to_start_in_production_with_the_development_secret() -> None:
    env = {
        **os.environ,
        "FANLINE_ENV": "production",
        "FANLINE_INTERNAL_TOKEN": GOOD["FANLINE_INTERNAL_TOKEN"],
        "FANLINE_API_PORT": "1",
    }
    env.pop("FANLINE_CURSOR_SECRET", None)
    done = subprocess.run([sys.executable, "-m", "fanline_api"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "FANLINE_CURSOR_SECRET" in done.stderr


# --- the clients send it ---------------------------------------------------------------------


async def test_peer_clients_send_the_credential_and_report_a_refusal_as_unavailable() -> None:
    """The gateway's and the worker's clients put the token on every call; a
    peer refusing it is the deployment's fault, so it surfaces as 503
    (``Unavailable``, which the worker retries) — never as the user's 401."""
    from aiohttp import web

    from fanline_shared.clients.social_graph import SocialGraphClient
    from fanline_shared.errors import Unavailable

    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get(HEADER))
        if request.headers.get(HEADER) != TOKEN:
            return web.json_response({"error": {"code": "internal_unauthorized", "message": "no"}}, status=401)
        return web.json_response({"username": "alice"})

    app = web.Application()
    app.router.add_get("/internal/users/{name}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        good = SocialGraphClient("test", f"http://127.0.0.1:{port}", 5, token=TOKEN)
        assert (await good.get_user("alice"))["username"] == "alice"
        await good.close()
        bad = SocialGraphClient("test", f"http://127.0.0.1:{port}", 5, token="another-token-another-token")
        with pytest.raises(Unavailable, match="credential refused"):
            await bad.call("GET", "/internal/users/alice", operation="get_user", policy=None)
        await bad.close()
    finally:
        await runner.cleanup()
    assert seen == [TOKEN, "another-token-another-token"]
