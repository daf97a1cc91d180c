"""Fanline's web pages (Twissandra's, rebuilt): server-rendered HTML served by
the gateway on top of the same use cases as the JSON API."""

from __future__ import annotations

from .routes import routes
from .security import SESSION_COOKIE

__all__ = ["SESSION_COOKIE", "routes"]
