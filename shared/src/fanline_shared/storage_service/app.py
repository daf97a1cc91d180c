"""``storage_app``: a storage service's Starlette app around its own routes.

The kit adds what every storage service serves the same way: the lifespan
that opens, starts and finally closes the storage (``app.state.storage``),
the outbox routes over ``storage.outbox``, ``/healthz``, ``/readyz`` (the
storage answers, and the service's own ``checks``; ``/metrics`` is on the
metrics port, ``http_server.MetricsPort``), and the middlewares (``guard``)
— request id (outermost: every answer carries it), admission control, then
the internal credential — whose steps callers in the same process take
without the chain (``http_local.InProcess``). The service's own start-up and
shutdown run inside, in ``running``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from starlette.applications import Starlette
from starlette.routing import BaseRoute

from .. import metrics
from ..admission import Admission, AdmissionMiddleware
from ..http_local import InProcess
from ..http_routes import EXCEPTION_HANDLERS, ReadinessCheck, ops_routes
from ..internal_auth import InternalAuthMiddleware
from ..logs import RequestIdMiddleware
from ..outbox.routes import outbox_routes
from ..policies import AdmissionPolicy
from .settings import StorageServiceSettings
from .storage import ServiceStorage

S = TypeVar("S", bound=ServiceStorage)


def storage_app(
    settings: StorageServiceSettings,
    version: str,
    routes: Sequence[BaseRoute],
    *,
    open_storage: Callable[[], S],
    running: Callable[[Starlette, S], AbstractAsyncContextManager[None]],
    checks: Mapping[str, ReadinessCheck] | None = None,
) -> Starlette:
    """The app of ``settings.SERVICE``: its ``routes`` plus the kit's.

    At start-up the lifespan calls ``open_storage()``, starts the storage and
    enters ``running(app, storage)`` (the service builds its domain objects
    there, on ``app.state``); at shutdown it leaves ``running`` and closes the
    storage. ``checks``: the service's own readiness checks, beside the
    storage's (``ops_routes``)."""
    service = settings.SERVICE

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        storage = open_storage()
        await storage.start()
        app.state.storage = storage
        try:
            async with running(app, storage):
                metrics.set_build_info(service, version)
                yield
        finally:
            await storage.close()

    async def ping_storage() -> None:
        await app.state.storage.ping()

    app = Starlette(
        routes=[
            *routes,
            *outbox_routes(service, lambda request: request.app.state.storage.outbox),
            *ops_routes(service, {"storage": ping_storage, **(checks or {})}),
        ],
        lifespan=lifespan,
        exception_handlers=EXCEPTION_HANDLERS,
    )
    guard(app, service, settings.admission, settings.internal_token)
    return app


def guard(app: Starlette, service: str, policy: AdmissionPolicy, token: str | None) -> None:
    """The kit's middlewares on ``app`` — request id (outermost: every answer
    carries it), admission control (``policy``), the internal credential
    (``token``) — and the same steps for callers in this process without the
    chain (``app.state.in_process``, ``http_local.InProcess``)."""
    admission = Admission(policy, service, token)
    app.add_middleware(InternalAuthMiddleware, token=token, service=service)
    app.add_middleware(AdmissionMiddleware, admission=admission)
    app.add_middleware(RequestIdMiddleware)
    app.state.in_process = InProcess(app.router.routes, admission, token.encode() if token else None)
