"""A small client for the public API, used by the end-to-end tests the way
an API client would use Fanline (HTTP only, no peeking into storage)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

PASSWORD = "correct horse battery"


class Api:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.http = httpx.Client(base_url=base_url, timeout=30)

    def close(self) -> None:
        self.http.close()

    # --- raw -------------------------------------------------------------------
    def request(self, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
        headers = dict(kw.pop("headers", {}) or {})
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return self.http.request(method, path, headers=headers, **kw)

    # --- helpers ---------------------------------------------------------------
    def unique_name(self, prefix: str = "u") -> str:
        return f"{prefix}{uuid.uuid4().hex[: 14 - len(prefix)]}"[:15]

    def sign_up(self, username: str | None = None, password: str = PASSWORD) -> str:
        username = username or self.unique_name()
        r = self.request("POST", "/v1/users", json={"username": username, "password": password})
        assert r.status_code == 201, r.text
        return username

    def login(self, username: str, password: str = PASSWORD) -> str:
        r = self.request("POST", "/v1/sessions", json={"username": username, "password": password})
        assert r.status_code == 200, r.text
        return str(r.json()["token"])

    def user(self, prefix: str = "u") -> tuple[str, str]:
        """A new user and a token for them."""
        name = self.sign_up(self.unique_name(prefix))
        return name, self.login(name)

    def follow(self, token: str, username: str, target: str) -> None:
        r = self.request("PUT", f"/v1/users/{username}/following/{target}", token)
        assert r.status_code == 204, r.text

    def unfollow(self, token: str, username: str, target: str) -> None:
        r = self.request("DELETE", f"/v1/users/{username}/following/{target}", token)
        assert r.status_code == 204, r.text

    def post(self, token: str, body: str, key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": key} if key else {}
        r = self.request("POST", "/v1/tweets", token, json={"body": body}, headers=headers)
        assert r.status_code in (200, 201), r.text
        return dict(r.json())

    def page(self, path: str, token: str | None = None, **params: Any) -> dict[str, Any]:
        r = self.request("GET", path, token, params=params)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def all_items(self, path: str, token: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": limit}
            if cursor:
                params["cursor"] = cursor
            page = self.page(path, token, **params)
            items.extend(page["items"])
            cursor = page["next_cursor"]
            if not cursor:
                return items

    def home_ids(self, token: str, limit: int = 100) -> list[str]:
        return [t["id"] for t in self.page("/v1/timeline", token, limit=limit)["items"]]


def eventually(check: Callable[[], bool], timeout: float = 20.0, interval: float = 0.1, what: str = "") -> None:
    """Poll until ``check()`` is true (timelines are eventually consistent)."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout}s: {what or check}")
        time.sleep(interval)
