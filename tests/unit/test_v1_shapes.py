"""The /v1 shapes (services/api/v1.py) are exactly api.md's fields."""

from fanline_api.v1 import TWEET_FIELDS, USER_FIELDS, v1_page, v1_tweet, v1_user


def test_a_tweet_has_exactly_the_v1_fields() -> None:
    internal = {"id": "i", "username": "u", "body": "b", "created_at": "c", "sid": "1"}
    assert tuple(v1_tweet(internal)) == TWEET_FIELDS
    page = v1_page({"items": [internal], "next_cursor": None, "next_sid": "1"})
    assert page == {"items": [{"id": "i", "username": "u", "body": "b", "created_at": "c"}], "next_cursor": None}
    assert tuple(v1_user({"username": "u", "created_at": "c", "account_id": "9"})) == ("username", "created_at")
    assert set(USER_FIELDS) >= {"username", "created_at"}
