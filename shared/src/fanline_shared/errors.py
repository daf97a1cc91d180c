"""Domain errors. They carry a stable machine code and a human message.

Nothing here knows about HTTP: the edges (``fanline_shared.http_routes``) map each
class to a status code in one table. Internal services send the same error
body over HTTP; ``fanline_shared.http_client`` turns it back into the same class, so
an error raised in social-graph reaches the gateway's edge unchanged.
"""

from __future__ import annotations


class DomainError(Exception):
    """Base of every expected, client-visible failure."""

    code = "error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidInput(DomainError):
    """Well-formed request that breaks a rule (422)."""

    code = "invalid_input"


class BadRequest(DomainError):
    """Malformed request: not JSON, not an object, a forged cursor (400)."""

    code = "bad_request"


class Unauthorized(DomainError):
    """Missing, malformed, expired or revoked credentials (401)."""

    code = "unauthorized"


class Forbidden(DomainError):
    """Authenticated but acting on someone else's resource (403)."""

    code = "forbidden"


class NotFound(DomainError):
    """Unknown user, tweet or route (404)."""

    code = "not_found"


class Conflict(DomainError):
    """A uniqueness rule was hit, e.g. a taken username (409)."""

    code = "conflict"


class PayloadTooLarge(DomainError):
    """Request body above the limit (413)."""

    code = "payload_too_large"


class RateLimited(DomainError):
    """Too many requests; ``retry_after`` seconds until the next may pass (429)."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int = 1, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after
        self.headers: dict[str, str] = {}  # e.g. RateLimit-*, added to the response


class Unavailable(DomainError):
    """A dependency (Cassandra, Kafka, another service) did not answer (503)."""

    code = "unavailable"

    def __init__(self, message: str, *, retry_after: int = 1, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after = retry_after


# Set on every response refused by admission control; its value names the
# service that shed the request.
OVERLOADED_HEADER = "X-Fanline-Overloaded"


class Overloaded(Unavailable):
    """The service is past its capacity and refused the request before doing
    any of it (admission control, ``admission.py``) — or, for an idempotent
    background write, gave up on it at its caller's budget: safe to send again
    after ``retry_after``. A 503 whose code stays ``unavailable`` (api.md);
    peers recognise it by the ``X-Fanline-Overloaded`` header
    (``OVERLOADED_HEADER``, set when ``shed_by`` names the service) and do not
    retry it at once (``policies.PEER_REQUEST``)."""

    def __init__(self, message: str, *, retry_after: int = 1, code: str | None = None, shed_by: str | None = None) -> None:
        super().__init__(message, retry_after=retry_after, code=code)
        self.headers: dict[str, str] = {OVERLOADED_HEADER: shed_by} if shed_by else {}


def peer_overloaded(peer: str, retry_after: str) -> Overloaded:
    """What a caller makes of ``peer``'s shed answer (its ``Retry-After``
    value, seconds; anything else: 1): over HTTP (``http_client``) and in
    process (``http_local.Direct``) alike."""
    return Overloaded(f"{peer} is over its capacity; retry later", retry_after=int(retry_after) if retry_after.isdigit() else 1)


class PeerFailed(Unavailable):
    """A peer answered a 5xx other than 503: it is up but failed this request
    deterministically (a bug, an input it cannot handle). Still a 503 at our
    own edge, but background work must not retry it forever: the fan-out
    worker dead-letters the event after a bounded number of attempts. Its
    code stays ``unavailable`` (api.md: every 503 says so)."""


class MethodNotAllowed(DomainError):
    """The route exists but not with this method (405)."""

    code = "method_not_allowed"


# Status codes, used by the HTTP edges only.
STATUS: dict[type[DomainError], int] = {
    BadRequest: 400,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    MethodNotAllowed: 405,
    Conflict: 409,
    PayloadTooLarge: 413,
    InvalidInput: 422,
    RateLimited: 429,
    Unavailable: 503,
}

_BY_STATUS = {status: cls for cls, status in STATUS.items()}


def status_of(error: DomainError) -> int:
    """HTTP status for a domain error (its nearest registered class)."""
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]  # type: ignore[index]
    return 500


def from_status(status: int, code: str, message: str) -> DomainError:
    """Rebuild a domain error from a peer's error response."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        if status >= 500:
            return PeerFailed(f"peer answered {status}: {message}")
        return Unavailable(f"peer answered {status}: {message}")
    return cls(message, code=code)
