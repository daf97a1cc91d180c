"""What one statement of each kind the services send costs Cassandra, and the
client, at a steady low rate (issue 31: the whole system's CPU per request is
mostly per statement).

A focused measurement beside the scenarios, on a keyspace of its own with the
shapes of the tables behind a post and a home read: the tweet's logged batch
(tweet, userline, public line, outbox row) and the same four rows unlogged,
one plain insert, the author's counter, one home-timeline row, a tweet read
by id and a 20-row home slice. Each kind runs alone at ``--rate`` statements/s
for ``--seconds``, through the services' own bridge and connection settings
(``fanline_shared.cassandra``, the loop reactor), after a warm-up; Cassandra's
CPU comes from ``/proc`` with its idle CPU (measured first) subtracted, the
client's from this process (``bench.cql_statements``).

``--driver`` chooses cassandra-driver's build for the client: ``sources``
(what the storage services run, ``fanline_shared.driver_sources``),
``compiled`` (the wheel's Cython modules), or ``both``: one process per round
and build, alternating, so the two are compared on the same machine state.

    python -m bench.cql_cost               # single-node engines (make infra-up)
    python -m bench.cql_cost --rate 100 --seconds 20 --rounds 2
    python -m bench.cql_cost --driver both --rounds 3
    python -m bench.cql_cost --rate 0     # one statement after another: no pacing

Reads are served from memtables and a few small SSTables: what a short
benchmark run sees too, not a node with gigabytes on disk.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys

from fanline_shared.driver_sources import loaded_from_sources, prefer_sources

BUILDS = ("sources", "compiled")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200.0, help="statements per second of each kind (0: one after another)")
    parser.add_argument("--seconds", type=float, default=15.0, help="how long each kind runs")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--driver", choices=(*BUILDS, "both"), default="sources", help="cassandra-driver's build")
    args = parser.parse_args()
    if args.driver == "both":
        for _ in range(args.rounds):
            for build in BUILDS:
                command = [sys.executable, "-m", "bench.cql_cost", "--driver", build, "--rounds", "1"]
                subprocess.run([*command, "--rate", str(args.rate), "--seconds", str(args.seconds)], check=True)
        return
    if args.driver == "sources":
        prefer_sources()  # before the driver is imported (by cql_statements)
    from . import cql_statements

    build = "sources" if loaded_from_sources() else "compiled"
    asyncio.run(cql_statements.measure(args.rate, args.seconds, args.rounds, label=f", driver {build}"))


if __name__ == "__main__":
    main()
