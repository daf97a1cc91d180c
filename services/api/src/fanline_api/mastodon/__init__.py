"""The Mastodon-compatible client API, served by the gateway beside ``/v1``
(docs/mastodon.md): ``/api/v1``, ``/api/v2``, ``/oauth/*`` and
``/.well-known/oauth-authorization-server``.

Every route here is a thin edge over the same ``Gateway`` use cases as
``/v1`` (one service layer): it parses Mastodon's parameters (``params``),
renders Mastodon's entities (``entities``) and turns domain errors into
Mastodon's error bodies (``errors``). ``routes.routes`` assembles them.
"""
