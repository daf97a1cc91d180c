"""Typed clients of the services' internal APIs, one module per owner.

``social_graph`` and ``tweet_store`` are what the gateway, the fan-out worker,
tweet-store (home reads ask social-graph whom a reader follows) and the CLI
call; nobody reads another service's tables, and no service imports another
service's package. Each client is a thin typed layer over
``fanline_shared.http_client.PeerClient``; its routes are served by the
owner's ``app.py``.
"""
