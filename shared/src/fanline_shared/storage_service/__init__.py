"""The storage-service kit: what social-graph and tweet-store share.

A storage service owns tables (in embedded SQLite or Cassandra), serves an
internal HTTP API over them, and publishes events through its outbox. The kit
holds everything that is the same in both, so each service keeps only its
tables, its routes and its domain rules:

* ``storage`` — the ``Lifecycle`` port, ``StorageLifecycle`` (a service's
  storage starts, pings and closes through its engine) and ``Backends``, the
  registry of adapter modules per ``FANLINE_BACKEND``;
* ``schema`` — ``Migration`` and ``compose``: a service's own migrations and
  the outbox's, merged into one positional list;
* ``sqlite_engine`` — ``SqliteEngine``, the embedded engine's lifecycle;
* ``settings`` — ``StorageServiceSettings``: listen address, storage, service
  credential and admission control, declared once;
* ``app`` — ``storage_app``: the common lifespan, middlewares (request id,
  admission, internal auth), outbox and operations routes;
* ``main`` — ``StorageService``: ``fanline-<service>`` serves,
  ``fanline-<service> migrate`` applies the schema and exits.

The submodules are imported one by one (nothing is re-exported here), so the
embedded default never loads what only Cassandra needs.
"""
