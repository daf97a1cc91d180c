"""The gateway's use cases: each public operation as one method.

It composes the peers (social-graph, tweet-store), the event publisher and the
outbox relay. It speaks domain types and raises domain errors; ``app.py`` maps
HTTP to these methods and errors to status codes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fanline_shared import metrics
from fanline_shared import scopes as scope_rules
from fanline_shared.clients.social_graph import SocialGraphClient
from fanline_shared.clients.tweet_store import TweetStoreClient
from fanline_shared.domain import (
    MAX_USERNAMES_PER_LOOKUP,
    OutboxEvent,
    canonical,
    is_valid_username,
    parse_tweet_id,
    validate_body,
    validate_password,
    validate_username,
)
from fanline_shared.errors import BadRequest, Forbidden, InvalidInput, NotFound, Unauthorized
from fanline_shared.kafka import EventPublisher
from fanline_shared.logs import get_logger
from fanline_shared.outbox import OutboxRelay
from fanline_shared.outbox.wire import event_from_json

from .accounts import AccountCache
from .cursors import CursorCodec, decode_timeline, encode_timeline, validate_since_id
from .gateway_accounts import AccountCases
from .principal import NotAUser, Principal
from .ratelimit import LoginGuard
from .sessions import SessionCache

log = get_logger(__name__)


def _user_not_found(username: str) -> NotFound:
    return NotFound(f"no user named '{username[:32]}'", code="user_not_found")


def validate_idempotency_key(value: str | None) -> str | None:
    """1-64 printable ASCII characters, not starting or ending with a
    space, or ``invalid_idempotency_key``."""
    if value is None:
        return None
    # Edge spaces are refused too: HTTP may strip them on the way, so such a
    # key would not mean the same to every hop (OpenAPI states the pattern).
    if not 1 <= len(value) <= 64 or not all(0x20 <= ord(c) <= 0x7E for c in value) or value != value.strip(" "):
        raise InvalidInput("Idempotency-Key must be 1-64 printable ASCII characters", code="invalid_idempotency_key")
    return value


class Gateway(AccountCases):
    def __init__(
        self,
        social: SocialGraphClient,
        tweets: TweetStoreClient,
        publisher: EventPublisher,
        relay: OutboxRelay,
        cursors: CursorCodec,
        logins: LoginGuard | None = None,
        sessions: SessionCache | None = None,
        *,
        accounts: AccountCache | None = None,
        registrations: bool = True,
    ) -> None:
        self.logins = logins
        # Accounts as the Mastodon-compatible API renders them (accounts.py).
        self.accounts = accounts or AccountCache(social, tweets)
        # Whether anyone may sign up (/v1/users, the web page, /api/v1/accounts).
        self.registrations = registrations
        self.social = social
        # Verified tokens (sessions.py); without one, every request asks social-graph.
        self.sessions = sessions if sessions is not None else SessionCache(lambda t: self.social.grant(t), 0)
        self.tweets = tweets
        self.publisher = publisher
        self.relay = relay
        self.cursors = cursors
        self._publishing: set[asyncio.Task[None]] = set()

    # --- events -----------------------------------------------------------------

    def _publish(self, source: str, event_json: dict[str, Any]) -> None:
        """Fast path, off the request's clock: hand the event to the producer
        now and answer without waiting for the broker.

        The owning service stored the change and this event in one write
        before answering us, so nothing acknowledged depends on this send: if
        it fails, or this process dies first, the relay publishes the event
        from the outbox a few seconds later. Tasks start in creation order, so
        events still reach the producer in the order their requests ran."""
        event = event_from_json(event_json)
        task = asyncio.create_task(self._publish_now(source, event))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def _publish_now(self, source: str, event: OutboxEvent) -> None:
        # Runs in a task made inside the request: its request id is bound here too.
        if await self.publisher.publish(event):
            self.relay.published(source, event.id)
            log.info("event.published", event_id=str(event.id), source=source, path="fast")
        else:
            self.relay.read_soon()
            log.info(
                "event.publish_deferred",
                event_id=str(event.id),
                source=source,
                reason="broker unavailable: the outbox relay publishes it",
            )

    async def drain(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the fast-path sends still in flight."""
        if self._publishing:
            await asyncio.wait(set(self._publishing), timeout=timeout_s)

    # --- users and sessions --------------------------------------------------------

    async def sign_up(self, body: dict[str, Any]) -> dict[str, Any]:
        if not self.registrations:
            raise Forbidden("registrations are closed on this server", code="registrations_closed")
        validate_username(body.get("username"))
        validate_password(body.get("password"))
        profile = await self.social.create_user(body["username"], body["password"])
        return {**profile, "tweets_count": 0}

    async def user(self, username: str) -> dict[str, Any]:
        if not is_valid_username(username):
            raise _user_not_found(username)
        profile, counts = await asyncio.gather(self.social.get_user(username), self.tweets.counts([username]))
        return {**profile, "tweets_count": counts.get(canonical(username), 0)}

    async def users(self, raw: str | None) -> list[dict[str, Any]]:
        names = [n.strip() for n in (raw or "").split(",") if n.strip()]
        if len(names) > MAX_USERNAMES_PER_LOOKUP:
            raise InvalidInput(f"at most {MAX_USERNAMES_PER_LOOKUP} usernames per request", code="invalid_usernames")
        names = [n for n in names if is_valid_username(n)]
        if not names:
            return []
        profiles, counts = await asyncio.gather(self.social.get_users(names), self.tweets.counts(names))
        return [{**p, "tweets_count": counts.get(canonical(p["username"]), 0)} for p in profiles]

    async def search(self, prefix: str, limit: int) -> list[dict[str, Any]]:
        if not prefix or not is_valid_username(prefix):
            return []
        profiles = await self.social.search_users(prefix, limit)
        if not profiles:
            return []
        counts = await self.tweets.counts([p["username"] for p in profiles])
        return [{**p, "tweets_count": counts.get(canonical(p["username"]), 0)} for p in profiles]

    async def login(self, body: dict[str, Any], address: str = "unknown") -> dict[str, Any]:
        """A session, or ``Unauthorized``; ``RateLimited`` once this username
        or ``address`` (the client's) has used up its failed log-ins — then
        no password is even hashed."""
        username = body.get("username")
        if self.logins is not None:
            await self.logins.check(username, address)
        try:
            return await self.social.login(username, body.get("password"))  # type: ignore[arg-type]
        except Unauthorized:
            if self.logins is not None:
                await self.logins.failed(username, address)
            raise

    async def authenticate(self, authorization: str | None, need: tuple[str, ...] | None = None) -> str:
        """The token's username, or ``Unauthorized`` (also for an app's own
        token: it names no user); with ``need``, ``InsufficientScope`` (403)
        unless the token's scopes admit one of them."""
        return (await self.signed_in(authorization, need)).username

    async def principal(self, authorization: str | None) -> Principal:
        """Whose the token is (a user, or an app), with its scopes; or ``Unauthorized``."""
        return Principal.from_grant(await self.sessions.lookup(self.bearer(authorization)))

    async def signed_in(self, authorization: str | None, need: tuple[str, ...] | None = None) -> Principal:
        """A user's token (``Unauthorized`` for an app token, ``NotAUser`` on
        the Mastodon API) admitted by ``need`` (``InsufficientScope``)."""
        who = await self.principal(authorization)
        if who.kind != "user":
            raise NotAUser("this needs a user's token, not an app's", code="unauthorized")
        who.require(need)
        return who

    async def session(self, authorization: str | None) -> tuple[str, str | None]:
        """The token's username and, if they came back after being inactive,
        when (see ``regenerating``); or ``Unauthorized``."""
        who = await self.signed_in(authorization)
        return who.username, who.returned_at

    @staticmethod
    def bearer(authorization: str | None) -> str:
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        # Visible ASCII only: a token is forwarded in a header, and a control
        # character (a crafted cookie "a\012b") must be a 401, not a 500.
        if scheme.lower() != "bearer" or not token or len(token) > 200 or not _visible_ascii(token):
            raise Unauthorized("missing or malformed bearer token", code="unauthorized")
        return token

    async def logout(self, authorization: str | None) -> None:
        token = self.bearer(authorization)
        revoked = await self.social.logout(token)
        self.sessions.forget(token)  # refused here from now on; elsewhere once the event arrives
        if revoked is not None:
            self._publish("social-graph", revoked["event"])

    # --- social graph ---------------------------------------------------------------

    async def edges(self, username: str, direction: str, limit: int, cursor: str | None) -> dict[str, Any]:
        after = self.cursors.decode(direction, cursor)
        if not is_valid_username(username):
            raise _user_not_found(username)
        page = await self.social.edges(username, direction, limit, after)
        nxt = page.get("next")
        return {"items": page["items"], "next_cursor": self.cursors.encode(direction, nxt) if nxt else None}

    async def follow(self, actor: str, username: str, target: str, *, follow: bool) -> None:
        if canonical(actor) != canonical(username):
            raise Forbidden("you can only change whom you follow", code="forbidden")
        if canonical(username) == canonical(target):
            raise InvalidInput("you cannot follow yourself", code="cannot_follow_self")
        if not is_valid_username(target):
            raise _user_not_found(target)
        call = self.social.follow if follow else self.social.unfollow
        result = await call(actor, target)
        self._publish("social-graph", result["event"])

    # --- tweets ----------------------------------------------------------------------

    async def post(self, actor: str, body: dict[str, Any], idempotency_key: str | None) -> tuple[dict[str, Any], bool]:
        text = validate_body(body.get("body"))
        key = validate_idempotency_key(idempotency_key)
        result = await self.tweets.create_tweet(actor, text, key)
        log.info("tweet.posted", tweet_id=result["tweet"]["id"], author=actor, created=bool(result["created"]))
        self._publish("tweet-store", result["event"])
        if result["created"]:
            metrics.TWEETS_POSTED.inc()
        return result["tweet"], bool(result["created"])

    async def tweet(self, tweet_id: str) -> dict[str, Any]:
        if parse_tweet_id(tweet_id) is None:
            raise NotFound(f"no tweet {tweet_id[:64]}", code="tweet_not_found")
        return await self.tweets.get_tweet(tweet_id)

    async def delete(self, actor: str, tweet_id: str) -> None:
        if parse_tweet_id(tweet_id) is None:
            raise NotFound(f"no tweet {tweet_id[:64]}", code="tweet_not_found")
        result = await self.tweets.delete_tweet(tweet_id, actor)
        self._publish("tweet-store", result["event"])
        metrics.TWEETS_DELETED.inc()

    # --- timelines ---------------------------------------------------------------------

    async def timeline(
        self,
        kind: str,
        owner: str | None,
        limit: int,
        cursor: str | None,
        since_id: str | None = None,
        *,
        sids: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """One page, newest first; ``since_id`` (validated, or carried by the
        cursor) keeps only ids strictly newer, on this page and the next ones.
        ``sids``: Mastodon's bounds (max_sid, since_sid, min_sid) instead."""
        cursor_kind = f"tl:{kind}"
        since = validate_since_id(since_id)
        before, carried = decode_timeline(self.cursors, cursor_kind, cursor)
        since = carried or since
        if kind == "user":
            assert owner is not None
            if not is_valid_username(owner):
                raise _user_not_found(owner)
            # The user must exist (404). Only users write tweets and users are
            # never deleted, so a page with a tweet proves it: social-graph is
            # asked only when the page is empty.
            page = await self.tweets.timeline(kind, owner, limit, before, since, sids=sids)
            if not page["items"]:
                await self.social.get_user(owner)
        else:
            page = await self.tweets.timeline(kind, owner, limit, before, since, sids=sids)
        return self._page(cursor_kind, page, since)

    def _page(self, cursor_kind: str, page: dict[str, Any], since: str | None) -> dict[str, Any]:
        nxt = page.get("next")
        return {
            "items": page["items"],
            "next_cursor": encode_timeline(self.cursors, cursor_kind, nxt, since) if nxt else None,
            # The status id of the slice's last (oldest) id: Mastodon's next max_id
            # when every tweet of the page was deleted.
            "next_sid": page.get("next_sid"),
        }

    async def home_timeline(
        self,
        authorization: str | None,
        limit: int,
        cursor: str | None,
        since_id: str | None = None,
        *,
        sids: dict[str, int] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """The token's user's home timeline, and whether it is being
        regenerated (the user came back after being inactive: ``206``).

        Tokens name their user (``<username>.<secret>``, still opaque to
        clients), so the timeline slice is read *while* the token is verified
        instead of after it: the read costs one round trip less. The page is
        returned only if verification succeeds and names the same user (and
        its scopes admit reading statuses). A token verified a moment ago
        (``sessions.py``) costs no round trip: the page is then the only call.
        ``sids``: Mastodon's bounds (max_sid, since_sid, min_sid) instead of a
        cursor."""
        token = self.bearer(authorization)
        try:
            since = validate_since_id(since_id)
            before, carried = decode_timeline(self.cursors, "tl:home", cursor)
            since = carried or since
        except (BadRequest, InvalidInput):
            await self.sessions.lookup(token)  # a bad token is reported first
            raise

        async def verify() -> Principal:
            return await self.signed_in(f"Bearer {token}", scope_rules.READ_STATUSES)

        claimed, dot, _ = token.partition(".")
        if not (dot and is_valid_username(claimed)) or self.sessions.has(token):
            who = await verify()
            page = await self.tweets.timeline("home", who.username, limit, before, since, sids=sids)
        else:
            page_task = asyncio.ensure_future(self.tweets.timeline("home", claimed, limit, before, since, sids=sids))
            try:
                who = await verify()
                if canonical(who.username) != canonical(claimed):
                    raise Unauthorized("invalid, expired or revoked token", code="unauthorized")
            except BaseException:
                page_task.cancel()
                await asyncio.gather(page_task, return_exceptions=True)
                raise
            page = await page_task
        regenerating = await self.regenerating(who.username, who.returned_at)
        return self._page("tl:home", page, since), regenerating

    async def regenerating(self, actor: str, returned_at: str | None) -> bool:
        """True while the home timeline of a user who came back after being
        inactive (``returned_at``, from their session) is being regenerated;
        the first such read starts the regeneration (api.md: ``206``)."""
        if returned_at is None:
            return False
        return not await self.tweets.home_regeneration_done(actor, returned_at)

    # --- used by the web pages (webui/) ---------------------------------------------------

    async def is_following(self, follower: str, followee: str) -> bool:
        """Whether ``follower`` follows ``followee``; False for oneself or a malformed name."""
        if not (is_valid_username(follower) and is_valid_username(followee)):
            return False
        if canonical(follower) == canonical(followee):
            return False
        return await self.social.is_following(follower, followee)


def _visible_ascii(value: str) -> bool:
    """Every character in 0x21-0x7E (printable ASCII but the space): three
    string methods in C instead of a generator over the characters, run on
    every signed-in request."""
    return value.isascii() and value.isprintable() and " " not in value
