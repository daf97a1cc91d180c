"""Fanline's Mastodon entities against the JSON a real Mastodon answered in
Mastodon.py's recorded tests (its source package's ``tests/cassettes``,
fetched at test time with ``pip download`` into ``build/``; none of it is
committed).

For every entity: each field the real server sent is present (except the
few listed in ``OMITTED``, each with its reason), and where both values are
non-null they have the same JSON type, recursively (a status's account, a
v2 instance's configuration). Fields Fanline adds beyond the recording are
allowed: Mastodon's entity documentation has them (some recordings predate
them)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
import yaml
from starlette.requests import Request

from fanline_api.mastodon import entities, instance, oauth
from fanline_shared.domain import utcnow
from fanline_social_graph.oauth import _token_json, app_json
from fanline_social_graph.ports import OAuthApp

REPO = Path(__file__).resolve().parents[2]
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: seconds instead of minutes
BASE = "https://fan.example"

# What a recording has that Fanline leaves out, and why.
OMITTED: dict[str, set[str]] = {
    # Mastodon 4.5+ features (quotes, featured collections, profile tabs) no client needs yet.
    "account": {
        "show_media",
        "show_media_replies",
        "show_featured",
        "feature_approval",
        "moved",
        "suspended",
        "limited",
        "memorial",
    },
    "status": {"quote_approval", "tagged_collections", "local_only", "text"},
    "instance_v2": {"wrapstodon", "icon"},
    "metadata": {"userinfo_endpoint", "introspection_endpoint"},
}


@pytest.fixture(scope="module")
def recordings() -> list[tuple[str, str, int, Any]]:
    """``(method, uri, status, body)`` of every recorded response with a JSON body."""
    version = importlib.metadata.version("Mastodon.py")
    cache = REPO / "build" / "mastodon-py-cassettes" / version
    done = cache / ".complete"
    if not done.exists():
        cache.mkdir(parents=True, exist_ok=True)
        fetched = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"Mastodon.py=={version}",
                "-d",
                str(cache),
            ],
            capture_output=True,
            text=True,
        )
        if fetched.returncode != 0:
            pytest.fail(
                f"could not fetch the Mastodon.py {version} source package (needs PyPI or pip's cache): {fetched.stderr[-500:]}"
            )
        [archive] = cache.glob("*.tar.gz")
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if "/tests/cassettes/" in m.name and m.name.endswith(".yaml")]
            tar.extractall(cache, members=members, filter="data")
        done.touch()
    found = []
    for path in sorted(cache.rglob("tests/cassettes/*.yaml")):
        for interaction in (yaml.load(path.read_text(), Loader=LOADER) or {}).get("interactions", []):
            text = interaction["response"]["body"].get("string", "")
            if not text or text[0] not in "[{":
                continue
            try:
                body = orjson.loads(text)
            except orjson.JSONDecodeError:
                continue
            request = interaction["request"]
            found.append((request["method"], request["uri"], interaction["response"]["status"]["code"], body))
    assert len(found) > 100, "the recordings were not found"
    return found


def recorded(recordings: list[tuple[str, str, int, Any]], method: str, suffix: str, *, key: str | None = None) -> dict[str, Any]:
    """The first successful recorded answer to ``method`` on a URI ending with ``suffix``."""
    for verb, uri, status, body in recordings:
        path = uri.split("?")[0].rstrip("/")
        if verb == method and status == 200 and path.endswith(suffix):
            sample = body[0] if isinstance(body, list) and body else body
            if isinstance(sample, dict) and (key is None or key in sample):
                return sample
    pytest.fail(f"no recorded {method} …{suffix}")


def kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def differences(theirs: Any, ours: Any, omitted: set[str], path: str = "") -> list[str]:
    """How ``ours`` departs from ``theirs``: missing fields, other types."""
    if theirs is None or ours is None:
        return []
    if kind(theirs) != kind(ours):
        return [f"{path or '.'}: {kind(ours)} where Mastodon has {kind(theirs)}"]
    out: list[str] = []
    if isinstance(theirs, dict):
        for name, value in theirs.items():
            if name in omitted:
                continue
            if name not in ours:
                out.append(f"{path}.{name}: missing")
            else:
                nested = OMITTED.get("account", set()) if name in ("account", "contact_account") else set()
                out += differences(value, ours[name], nested, f"{path}.{name}")
    elif isinstance(theirs, list) and theirs and ours:
        out += differences(theirs[0], ours[0], omitted, f"{path}[0]")
    return out


PROFILE = {"username": "ann", "created_at": "2026-11-26T13:34:22.388451Z", "id": "117440810532227399"}
PROFILE.update(followers_count=1, following_count=2, tweets_count=3)  # type: ignore[arg-type]
TWEET = {"id": "x", "username": "ann", "body": "hi", "created_at": "2026-11-26T13:34:22.388451Z", "sid": "117440813461137764"}


def request_for(**state: Any) -> Request:
    app = SimpleNamespace(state=SimpleNamespace(public_url=BASE, gateway=SimpleNamespace(registrations=True), **state))
    return Request({"type": "http", "method": "GET", "path": "/", "query_string": b"", "headers": [], "app": app})


async def rendered(handler: Any) -> dict[str, Any]:
    return dict(orjson.loads((await handler(request_for())).body))


def test_account(recordings: list[Any]) -> None:
    theirs = recorded(recordings, "GET", "/api/v1/accounts/lookup")
    assert differences(theirs, entities.account(PROFILE, BASE), OMITTED["account"]) == []


def test_credential_account(recordings: list[Any]) -> None:
    theirs = recorded(recordings, "GET", "/api/v1/accounts/verify_credentials", key="source")
    ours = entities.credential_account(PROFILE, BASE)
    assert differences(theirs, ours, OMITTED["account"] | {"role"}) == []
    assert set(theirs["source"]) - set(ours["source"]) == set()


def test_status(recordings: list[Any]) -> None:
    theirs = recorded(recordings, "POST", "/api/v1/statuses", key="content")
    ours = entities.status(TWEET, entities.account(PROFILE, BASE), BASE)
    assert differences(theirs, ours, OMITTED["status"]) == []


def test_deleted_status_carries_its_text(recordings: list[Any]) -> None:
    theirs = next(
        body for verb, uri, status, body in recordings if verb == "DELETE" and "/api/v1/statuses/" in uri and status == 200
    )
    ours = entities.status(TWEET, entities.account(PROFILE, BASE), BASE, source=True)
    assert "text" in theirs and "text" in ours and "content" not in ours
    assert differences(theirs, ours, OMITTED["status"] - {"text"} | {"content"}) == []


def test_relationship(recordings: list[Any]) -> None:
    theirs = recorded(recordings, "GET", "/api/v1/accounts/relationships")
    assert differences(theirs, entities.relationship("1", True, False), set()) == []


def test_application_and_token(recordings: list[Any]) -> None:
    theirs = recorded(recordings, "POST", "/api/v1/apps")
    app = OAuthApp("cid", "h", "toot", None, ("urn:ietf:wg:oauth:2.0:oob",), ("read", "write"), utcnow())
    ours = oauth.app_entity(app_json(app), secret="s")
    assert differences(theirs, ours, set()) == []
    token = recorded(recordings, "POST", "/oauth/token", key="access_token")
    assert differences(token, _token_json("t", ("read", "write")), set()) == []


async def test_instances(recordings: list[Any]) -> None:
    theirs_v1 = recorded(recordings, "GET", "/api/v1/instance", key="uri")
    assert differences(theirs_v1, await rendered(instance.v1), set()) == []
    theirs_v2 = recorded(recordings, "GET", "/api/v2/instance", key="domain")
    assert differences(theirs_v2, await rendered(instance.v2), OMITTED["instance_v2"]) == []


async def test_authorization_server_metadata(recordings: list[Any]) -> None:
    theirs = recorded(recordings, "GET", "/.well-known/oauth-authorization-server", key="issuer")
    assert differences(theirs, await rendered(oauth.metadata), OMITTED["metadata"]) == []


def test_the_comparison_catches_a_missing_field_and_a_wrong_type() -> None:
    theirs = {"id": "1", "emojis": [], "account": {"bot": False}, "x": 1}
    assert differences(theirs, {"id": 1, "emojis": None, "account": {}}, set()) == [
        ".id: number where Mastodon has str",
        ".account.bot: missing",
        ".x: missing",
    ]
