"""The local launcher: ``deploy.local.infra`` runs the real Cassandra and
Kafka on loopback (stdlib only), ``deploy.local.system`` runs Fanline's
services as processes (``make run``, ``make run-real``, the end-to-end tests
and the benchmark)."""
