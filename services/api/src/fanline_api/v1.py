"""The ``/v1`` shapes of users, tweets and pages (api.md), exactly: the
internal APIs also carry what the Mastodon-compatible API needs (account
ids, status ids), which ``/v1`` does not show."""

from __future__ import annotations

from typing import Any

USER_FIELDS = ("username", "created_at", "followers_count", "following_count", "tweets_count")
TWEET_FIELDS = ("id", "username", "body", "created_at")


def v1_user(profile: dict[str, Any]) -> dict[str, Any]:
    return {k: profile[k] for k in USER_FIELDS if k in profile}


def v1_tweet(tweet: dict[str, Any]) -> dict[str, Any]:
    # A literal, not a comprehension over TWEET_FIELDS: twice as fast, and
    # called for every tweet of every page.
    return {"id": tweet["id"], "username": tweet["username"], "body": tweet["body"], "created_at": tweet["created_at"]}


def v1_page(page: dict[str, Any]) -> dict[str, Any]:
    return {"items": [v1_tweet(t) for t in page["items"]], "next_cursor": page["next_cursor"]}
