"""What clients ask a server about itself: ``/api/v1/instance`` and
``/api/v2/instance`` (Mastodon's V1::InstanceSerializer and
InstanceSerializer), the streaming health check, and the small lists around
them. The version is ``4.3.0 (compatible; Fanline X.Y.Z)``: clients keep the
text before the first space to decide which features exist."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from fanline_shared.domain import BODY_MAX
from fanline_shared.http_routes import json_response

from .. import __version__
from .context import base, gw

MASTODON_VERSION = "4.3.0"
TITLE = "Fanline"
DESCRIPTION = "Twissandra's Twitter-style timelines as event-driven microservices, speaking the Mastodon client API."


def version() -> str:
    return f"{MASTODON_VERSION} (compatible; Fanline {__version__})"


def host(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0]


def streaming_url(url: str) -> str:
    return ("wss://" if url.startswith("https://") else "ws://") + host(url)


STATUSES = {"max_characters": BODY_MAX, "max_media_attachments": 0, "characters_reserved_per_url": 23}
MEDIA = {
    "supported_mime_types": [],
    "image_size_limit": 0,
    "image_matrix_limit": 0,
    "video_size_limit": 0,
    "video_frame_rate_limit": 0,
    "video_matrix_limit": 0,
    "description_limit": 0,
}
POLLS = {"max_options": 0, "max_characters_per_option": 0, "min_expiration": 0, "max_expiration": 0}


async def v1(request: Request) -> Response:
    url = base(request)
    registrations = gw(request).registrations
    body: dict[str, Any] = {
        "uri": host(url),
        "title": TITLE,
        "short_description": DESCRIPTION,
        "description": DESCRIPTION,
        "email": "",
        "version": version(),
        "urls": {"streaming_api": streaming_url(url)},
        "stats": {"user_count": 0, "status_count": 0, "domain_count": 1},
        "thumbnail": None,
        "languages": ["en"],
        "registrations": registrations,
        "approval_required": False,
        "invites_enabled": False,
        "configuration": {
            "accounts": {"max_featured_tags": 0},
            "statuses": STATUSES,
            "media_attachments": MEDIA,
            "polls": POLLS,
        },
        "contact_account": None,
        "rules": [],
    }
    return json_response(body)


async def v2(request: Request) -> Response:
    url = base(request)
    registrations = gw(request).registrations
    public = {"local": "public", "remote": "disabled"}
    body: dict[str, Any] = {
        "domain": host(url),
        "title": TITLE,
        "version": version(),
        "source_url": "https://github.com/",
        "description": DESCRIPTION,
        "usage": {"users": {"active_month": 0}},
        "thumbnail": {"url": f"{url}/headers/0.png", "description": "A strip of colour"},
        "icon": [],
        "languages": ["en"],
        "configuration": {
            "urls": {
                "streaming": streaming_url(url),
                "status": None,
                "about": f"{url}/public",
                "privacy_policy": None,
                "terms_of_service": None,
            },
            "vapid": {"public_key": ""},
            "accounts": {
                "max_display_name_length": 15,
                "max_note_length": 0,
                "max_avatar_description_length": 0,
                "max_header_description_length": 0,
                "max_featured_tags": 0,
                "max_pinned_statuses": 0,
                "max_profile_fields": 0,
                "profile_field_name_limit": 0,
                "profile_field_value_limit": 0,
            },
            "statuses": STATUSES,
            "media_attachments": MEDIA,
            "polls": POLLS,
            "translation": {"enabled": False},
            "timelines_access": {"live_feeds": public, "hashtag_feeds": public, "trending_link_feeds": public},
            "limited_federation": False,
        },
        "registrations": {
            "enabled": registrations,
            "approval_required": False,
            "reason_required": False,
            "message": None if registrations else "Registrations are closed.",
            "min_age": None,
            "url": None,
        },
        "api_versions": {"mastodon": 2},
        "contact": {"email": "", "account": None},
        "rules": [],
    }
    return json_response(body)


async def streaming_health(_: Request) -> Response:
    return PlainTextResponse("OK")


async def extended_description(_: Request) -> Response:
    return json_response({"updated_at": "2026-01-01T00:00:00.000Z", "content": f"<p>{DESCRIPTION}</p>"})
