"""Contract of social-graph's storage for the Mastodon-compatible API, run
against every adapter: account ids, emails, token grants, OAuth apps and
authorization codes."""

from __future__ import annotations

import asyncio
import secrets
from datetime import timedelta

import pytest

from fanline_shared.domain import Session, User, canonical, utcnow
from fanline_shared.errors import Conflict
from fanline_social_graph.accounts import candidate_id, hash16
from fanline_social_graph.adapters import SocialGraphStorage
from fanline_social_graph.ports import CodeGrant, OAuthApp

from .support import Names


def colliding_names(names: Names) -> tuple[str, str]:
    """Two fresh names whose account-id hashes are equal (a birthday search)."""
    seen: dict[int, str] = {}
    while True:
        name = names.user("c")
        other = seen.setdefault(hash16(canonical(name)), name)
        if other != name:
            return other, name


async def test_users_get_account_ids_ordered_by_sign_up_time(social_graph: SocialGraphStorage, names: Names) -> None:
    users = social_graph.users
    now = utcnow()
    first = await users.create(names.user("Id"), "h", now)
    second = await users.create(names.user("Id"), "h", now + timedelta(milliseconds=5))
    assert first.account_id == candidate_id(first.created_at, canonical(first.username))
    assert 0 < first.account_id < second.account_id
    assert (await users.get(first.username)) == first
    assert (await users.by_account_id(second.account_id)) == second
    assert await users.by_account_id(second.account_id + 1) is None
    assert await users.by_account_id(0) is None and await users.by_account_id(-3) is None


async def test_colliding_ids_take_the_next_free_value(social_graph: SocialGraphStorage, names: Names) -> None:
    a, b = colliding_names(names)
    when = utcnow()
    made = await asyncio.gather(social_graph.users.create(a, "h", when), social_graph.users.create(b, "h", when))
    ids = sorted(u.account_id for u in made)
    base = candidate_id(when, canonical(a))
    assert ids == [base, base + 1]
    for user in made:
        assert await social_graph.users.by_account_id(user.account_id) == user


async def test_a_lost_sign_up_leaves_no_account_under_its_id(social_graph: SocialGraphStorage, names: Names) -> None:
    """(On Cassandra the second sign-up claims an id before it loses the
    name: that claim must name nobody.)"""
    name = names.user()
    kept = await social_graph.users.create(name, "h", utcnow())
    later = utcnow().replace(microsecond=0) + timedelta(seconds=3)
    with pytest.raises(Conflict):
        await social_graph.users.create(name.upper(), "h", later)
    assert await social_graph.users.by_account_id(kept.account_id) == kept
    assert await social_graph.users.by_account_id(candidate_id(later, canonical(name))) is None


async def test_a_user_without_an_id_gets_the_same_one_from_every_caller(social_graph: SocialGraphStorage, names: Names) -> None:
    """Users created before account ids existed are assigned one (backfill,
    or lazily): concurrent callers agree on it."""
    user = await social_graph.users.create(names.user(), "h", utcnow())
    await _forget_account_id(social_graph, user)
    bare = await social_graph.users.get(user.username)
    assert bare is not None and bare.account_id == 0
    results = await asyncio.gather(*(social_graph.users.assign_account_id(bare) for _ in range(5)))
    assert len({r.account_id for r in results}) == 1 and results[0].account_id
    assert (await social_graph.users.get(user.username)).account_id == results[0].account_id  # type: ignore[union-attr]
    assert await social_graph.users.by_account_id(results[0].account_id) == results[0]


async def _forget_account_id(storage: SocialGraphStorage, user: User) -> None:
    """Make ``user`` look like one created before account ids (test setup)."""
    engine = storage.engine
    lc = canonical(user.username)
    if hasattr(engine, "db"):
        await engine.db.run(lambda c: c.execute("UPDATE users SET account_id = NULL WHERE username_lc = ?", (lc,)), name="t")
    else:
        from fanline_shared.cassandra import execute

        await execute(engine.session, f"UPDATE {engine.name}.users SET account_id = null WHERE username_lc = %s", (lc,), name="t")  # type: ignore[attr-defined]


async def test_emails_are_unique_regardless_of_case(social_graph: SocialGraphStorage, names: Names) -> None:
    users = social_graph.users
    address = f"{names.user()}@Example.org"
    made = await users.create(names.user(), "h", utcnow(), address)
    assert made.email == address
    assert await users.by_email(address.lower()) == made
    with pytest.raises(Conflict) as taken:
        await users.create(names.user(), "h", utcnow(), address.upper())
    assert taken.value.code == "email_taken"
    assert await users.by_email(f"nobody-{secrets.token_hex(3)}@example.org") is None
    assert (await users.create(names.user(), "h", utcnow())).email is None  # optional


async def test_of_concurrent_sign_ups_with_one_email_exactly_one_wins(social_graph: SocialGraphStorage, names: Names) -> None:
    address = f"{names.user()}@example.org"
    results = await asyncio.gather(
        *(social_graph.users.create(names.user(), "h", utcnow(), address) for _ in range(6)), return_exceptions=True
    )
    winners = [r for r in results if isinstance(r, User)]
    assert len(winners) == 1, results
    assert all(isinstance(r, Conflict) and r.code == "email_taken" for r in results if not isinstance(r, User))
    assert await social_graph.users.by_email(address) == winners[0]


async def test_an_email_held_by_a_lost_sign_up_is_free_again(social_graph: SocialGraphStorage, names: Names) -> None:
    name = names.user()
    await social_graph.users.create(name, "h", utcnow())
    address = f"{names.user()}@example.org"
    with pytest.raises(Conflict) as taken:
        await social_graph.users.create(name, "h", utcnow(), address)
    assert taken.value.code == "username_taken"
    assert await social_graph.users.by_email(address) is None
    other = await social_graph.users.create(names.user(), "h", utcnow(), address)
    assert await social_graph.users.by_email(address) == other


# --- token grants --------------------------------------------------------------------


async def test_tokens_keep_their_grant(social_graph: SocialGraphStorage, names: Names) -> None:
    sessions = social_graph.sessions
    user_token, app_token, plain = (secrets.token_hex(32) for _ in range(3))
    name = names.user()
    await sessions.create(user_token, name, None, scopes="read write:statuses", client_id="app-1")
    await sessions.create(app_token, "", None, scopes="read", client_id="app-1", kind="app")
    expires = utcnow() + timedelta(hours=1)
    await sessions.create(plain, name, expires)
    assert await sessions.get(user_token) == Session(name, None, "read write:statuses", "app-1", "user")
    assert await sessions.get(app_token) == Session("", None, "read", "app-1", "app")
    got = await sessions.get(plain)
    assert got is not None and got.scopes == "read write follow push" and got.client_id is None and got.kind == "user"
    await sessions.revoke(user_token)
    assert await sessions.get(user_token) is None


# --- OAuth apps and codes -------------------------------------------------------------


def an_app(client_id: str) -> OAuthApp:
    return OAuthApp(
        client_id=client_id,
        secret_hash="ab" * 32,
        name="toot",
        website="https://toot.example",
        redirect_uris=("urn:ietf:wg:oauth:2.0:oob", "https://app.example/cb"),
        scopes=("read", "write", "follow"),
        created_at=utcnow().replace(microsecond=123000),
    )


async def test_apps_are_stored_and_read_back(social_graph: SocialGraphStorage) -> None:
    app = an_app(secrets.token_urlsafe(16))
    await social_graph.oauth.create_app(app)
    assert await social_graph.oauth.get_app(app.client_id) == app
    assert await social_graph.oauth.get_app("nope-" + secrets.token_hex(4)) is None


async def test_a_code_is_taken_once_by_exactly_one_of_concurrent_takers(social_graph: SocialGraphStorage, names: Names) -> None:
    grant = CodeGrant("cid", names.user(), "urn:ietf:wg:oauth:2.0:oob", ("read", "write"), "x" * 43, "S256")
    code = secrets.token_hex(16)
    await social_graph.oauth.create_code(code, grant, 600)
    results = await asyncio.gather(*(social_graph.oauth.take_code(code) for _ in range(5)))
    assert [r for r in results if r is not None] == [grant]
    assert await social_graph.oauth.take_code(code) is None


async def test_an_expired_code_is_gone(social_graph: SocialGraphStorage, names: Names) -> None:
    grant = CodeGrant("cid", names.user(), "https://app.example/cb", ("read",))
    code = secrets.token_hex(16)
    await social_graph.oauth.create_code(code, grant, 1)
    await asyncio.sleep(2.2)
    assert await social_graph.oauth.take_code(code) is None
