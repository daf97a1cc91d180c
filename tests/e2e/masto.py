"""Helpers of the Mastodon-compatible API's end-to-end tests: a Mastodon.py
client for a user of a running system, and the systems they run on (the
session's embedded and real-engine systems: no system of their own)."""

from __future__ import annotations

import uuid

import httpx
from mastodon import Mastodon

from .client import PASSWORD, Api

SCOPES = ["read", "write", "follow", "push"]


def unique(prefix: str = "m") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def app(base_url: str, scopes: list[str] | None = None, name: str = "fanline e2e") -> tuple[str, str]:
    return Mastodon.create_app(name, scopes=scopes or SCOPES, api_base_url=base_url)


def client(base_url: str, app_credentials: tuple[str, str] | None = None, token: str | None = None) -> Mastodon:
    client_id, secret = app_credentials or (None, None)
    return Mastodon(
        client_id=client_id,
        client_secret=secret,
        access_token=token,
        api_base_url=base_url,
        ratelimit_method="throw",
        version_check_mode="none",
    )


def signed_up(base_url: str, scopes: list[str] | None = None, *, email: str | None = None) -> tuple[Mastodon, str]:
    """A new user (signed up through ``/v1/users``), logged in with the
    password grant (by email when given at sign-up: here through the
    Mastodon registration instead)."""
    credentials = app(base_url, scopes)
    name = unique()
    api = client(base_url, credentials)
    if email is None:
        plain = Api(base_url)
        try:
            plain.sign_up(name)
        finally:
            plain.close()
        api.log_in(name, PASSWORD, scopes=scopes or SCOPES, allow_http=True)
    else:
        api.create_account(name, PASSWORD, email, agreement=True, scopes=scopes or SCOPES)
    return api, name


def with_client(credentials: tuple[str, str], **fields: str) -> dict[str, str]:
    """A form body with the app's client credentials."""
    return {"client_id": credentials[0], "client_secret": credentials[1], **fields}


def raw(base_url: str, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=base_url, headers=headers, timeout=30)
