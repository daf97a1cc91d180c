"""The transactional outbox: how a 201 becomes a guaranteed fan-out.

1. The owning service (tweet-store, social-graph) writes the state change and
   its event in one atomic write (``ports.Outbox``).
2. The gateway publishes that event at once (the fast path) and remembers its
   id; a background ``OutboxRelay`` acknowledges published ids in batches.
3. The same relay sweeps every owner's outbox for events older than a few
   seconds that nobody acknowledged — the broker was down, or a gateway died
   between the write and the publish — publishes them and acknowledges them.

Events may therefore be published more than once; the worker is idempotent and
checks current state, so that is harmless. See docs/architecture.md.

Only one relay sweeps an outbox at a time: with N gateway replicas, N relays
sweeping after an outage published N copies of every waiting event. Each
relay asks the owner for the outbox's lease (``ports.RelayLease``, renewed
every third of ``FANLINE_RELAY_LEASE_S``); the holder sweeps, the others stand
by and take over once it lapses (or at once when a stopping holder releases
it). Every replica still acknowledges its own fast-path publishes.

Two acknowledgement modes (``FANLINE_OUTBOX_ACK``):

* ``broker`` (real Kafka, the default): a row is deleted once the broker
  acknowledged the event — Kafka keeps it durably from then on.
* ``applied`` (the embedded default, whose broker keeps messages in memory
  only): a published row is merely *marked* published; the fan-out worker
  deletes it once it applied the event (``AppliedAcks``), and the relay
  *replays* every published-but-unapplied row when it starts, since the broker
  may have lost them. Costs one more internal call per worker batch, so the
  real-Kafka path does not use it.

Modules: ``ports`` (the ``Outbox`` port every owner implements), ``wire``
(an event as JSON on the internal APIs), ``routes`` (the internal outbox API
each owner serves), ``client`` (the relay's and the worker's calls to it),
``relay`` (``OutboxRelay``, in the gateway) and ``applied`` (``AppliedAcks``,
in the fan-out worker). The adapters are ``fanline_shared.sqlite`` and
``fanline_shared.cassandra.outbox``.
"""

from __future__ import annotations

from .applied import AppliedAcks
from .relay import OutboxRelay
from .routes import outbox_routes

__all__ = ["AppliedAcks", "OutboxRelay", "outbox_routes"]
