"""The command line of the local launcher: ``python -m deploy.local.system``
(``make run``, ``make run-real``) and ``python deploy/local/system.py`` hand
over to ``main`` here, which parses the arguments, starts a ``System`` (and
any extra gateway replicas), prints its URLs and supervises it until Ctrl-C /
SIGTERM or a process exits, then stops everything. Split out of
``system.py``, which holds ``System`` (the library the tests and the
benchmark use). Stdlib only, like the rest of ``deploy.local``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from fanline_shared.config import Env

from . import system as _system
from .system import FANOUT_REPLICAS, REPO, System

# The help text's description: the first line of ``system.py``'s docstring.
DESCRIPTION = (_system.__doc__ or "Run the whole Fanline system as local processes.").splitlines()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--real", action="store_true", help="use the real Cassandra and Kafka started by `make infra-up`")
    parser.add_argument("--data-dir", default=os.environ.get("FANLINE_DATA_DIR", str(REPO / ".data")))
    parser.add_argument(
        "--base-port",
        type=int,
        default=8000,
        help="api, social-graph, tweet-store and worker listen on this port and the next three",
    )
    parser.add_argument(
        "--api-replicas", type=int, default=1, help="gateway processes (the extra ones listen on base+6, base+7, ...)"
    )
    parser.add_argument(
        "--fanout-replica",
        action="store_true",
        help="a social-graph and a tweet-store replica (base+4, base+5) only the fan-out worker calls",
    )
    parser.add_argument(
        "--colocate",
        action="store_true",
        default=Env(os.environ).boolean("FANLINE_COLOCATE", False),
        help="run social-graph and tweet-store inside the gateway's process, each on its own port "
        "(FANLINE_COLOCATE=1; docs/operations/scale.md)",
    )
    parser.add_argument(
        "--background-nice",
        type=int,
        default=0,
        choices=range(0, 20),
        metavar="0-19",
        help="CPU niceness of the fan-out worker and its replica (default 0)",
    )
    args = parser.parse_args()
    # On a terminal readable lines beat JSON; FANLINE_LOG_FORMAT=json keeps JSON.
    console = {"FANLINE_LOG_FORMAT": os.environ.get("FANLINE_LOG_FORMAT", "console")}

    if args.real:
        system = System(
            data_dir=Path(args.data_dir),
            base_port=args.base_port,
            backend="cassandra",
            kafka_bootstrap=os.environ.get("FANLINE_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
            extra_env={"FANLINE_KAFKA_IDEMPOTENCE": os.environ.get("FANLINE_KAFKA_IDEMPOTENCE", "true"), **console},
            fanout_replica=args.fanout_replica,
            background_nice=args.background_nice,
            colocate=args.colocate,
        )
    else:
        if args.fanout_replica:
            parser.error("--fanout-replica needs --real (the embedded SQLite stores are not shared between processes)")
        system = System(
            data_dir=Path(args.data_dir),
            base_port=args.base_port,
            extra_env=console,
            background_nice=args.background_nice,
            colocate=args.colocate,
        )

    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    # Ctrl-C too, explicitly: started from a script's background job (or
    # anything else that ignores SIGINT), Python would inherit "ignored" and
    # never raise KeyboardInterrupt, and Ctrl-C / `kill -INT` would do nothing.
    signal.signal(signal.SIGINT, on_signal)
    try:
        print(f"starting Fanline ({system.backend} storage, broker {system.bootstrap}) ...", flush=True)
        system.start()
        extra = [system.start_api_replica(i) for i in range(1, args.api_replicas)]
        print("\nFanline is up:")
        print(f"  API gateway     {system.url('api')}   (try {system.url('api')}/v1/public; {system.metrics_url('api')})")
        for url in extra:
            print(f"  API replica     {url}")
        print(f"  OpenAPI         {system.url('api')}/openapi.json")
        for name in ("social-graph", "tweet-store", *(FANOUT_REPLICAS if system.fanout_replica else ()), "fanout-worker"):
            nice = f", nice {system.nice_of(name)}" if system.nice_of(name) else ""
            print(f"  {name:<15} {system.url(name)}   (/healthz /readyz; {system.metrics_url(name)}{nice})")
        print(f"  data            {system.data_dir}")
        print("Press Ctrl-C to stop.\n", flush=True)
        while True:
            for name, proc in list(system.procs.items()):
                if proc.poll() is not None:
                    print(f"{name} exited with {proc.returncode}; stopping everything", file=sys.stderr)
                    return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\nstopping ...", flush=True)
        return 0
    except (RuntimeError, TimeoutError) as exc:
        print(f"start-up failed: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        system.stop()
        print("stopped.", flush=True)
