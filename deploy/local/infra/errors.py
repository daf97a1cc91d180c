"""What the launcher raises on purpose: ``InfraUnavailable`` means a
prerequisite is missing (callers may skip), ``EngineStartError`` that an
engine did not come up; both are ``InfraError``."""

from __future__ import annotations


class InfraError(RuntimeError):
    """Base class for everything this module raises on purpose."""


class InfraUnavailable(InfraError):
    """A prerequisite (java, mvn, Linux /proc, ...) is missing: callers may skip, not fail."""


class EngineStartError(InfraError):
    """An engine did not come up (crashed, timed out, port taken, ...)."""
