"""What runs where the driver reports completions, shared by ``bridge`` and ``window``.

cassandra-driver reports completions through callbacks on the thread that
serves its connections: the awaiting event loop itself (``loop_reactor``, the
default) or the driver's libev thread. ``_post`` hands an outcome to the
event loop — at once on the loop's own thread, else with
``call_soon_threadsafe`` (``_resolve`` sets it on the awaiting future, unless
that was cancelled);
``_translate`` counts a failure in ``metrics.CASSANDRA_ERRORS`` and maps
"the cluster did not answer" failures to ``fanline_shared.errors.Unavailable``
(request-validation errors and programming errors propagate unchanged);
``_release`` breaks the per-request reference cycle of a finished request.
"""

from __future__ import annotations

import asyncio
from asyncio import _get_running_loop
from typing import Any

from cassandra import RequestValidationException as _DriverValidationError
from cassandra.cluster import ResponseFuture
from cassandra.protocol import RequestValidationException as _ProtocolValidationError

from .. import metrics
from ..errors import Unavailable


def _is_validation_error(exc: BaseException) -> bool:
    return isinstance(exc, (_DriverValidationError, _ProtocolValidationError))


def _translate(exc: BaseException, name: str) -> BaseException:
    """Count the failure; map infrastructure failures to ``Unavailable``."""
    metrics.CASSANDRA_ERRORS.labels(name, type(exc).__name__).inc()
    if _is_validation_error(exc) or not isinstance(exc, Exception):
        return exc
    if isinstance(exc, (asyncio.CancelledError, TypeError, ValueError, KeyError)):
        return exc
    unavailable = Unavailable(f"cassandra: {name} failed: {type(exc).__name__}: {exc}")
    unavailable.__cause__ = exc
    return unavailable


def _resolve(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    """Runs in the loop thread."""
    if fut.done():  # the awaiting task was cancelled
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


def _post(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    """Hand the outcome to the loop: at once when the driver's connection is
    served by that loop itself (``loop_reactor``), else from the driver's
    thread with ``call_soon_threadsafe``."""
    if _get_running_loop() is loop:
        _resolve(fut, result, exc)
        return
    try:
        loop.call_soon_threadsafe(_resolve, fut, result, exc)
    except RuntimeError:  # loop closed while the request was in flight
        pass


def _release(response: ResponseFuture) -> None:
    """Drop a finished request's reference to its (already cancelled) timeout
    timer.

    The driver's timer calls back a bound method of the request, so every
    request is a reference cycle (request → timer → request) that only
    Python's cyclic GC frees — with its statement, message, event and query
    plan, ~26 objects per statement. Under fan-out that is 100k objects a
    second, and the collections that freed them stalled tweet-store's event
    loop for 10-60 ms at a time (measured with GC callbacks during the bench's
    post-latency phase). Callbacks run after the driver cancelled the timer
    (cassandra-driver 3.30: ``_set_final_result`` / ``_set_final_exception``);
    tests/contract/test_cassandra_bridge.py fails if a driver change makes
    requests cyclic garbage again.
    """
    response._timer = None
