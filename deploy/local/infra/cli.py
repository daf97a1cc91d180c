"""The command line: ``python3 deploy/local/infra fetch|up|down|status|
versions|logs|env|nodetool`` (``main`` returns the exit code: 0 ok, 1 status
not healthy, 2 infra error, 3 infra unavailable, 130 interrupted)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence

from .config import LOG_TAIL_LINES
from .errors import InfraError, InfraUnavailable
from .files import _tail
from .launcher import LocalInfra


def _print_status(infra: LocalInfra) -> bool:
    versions = infra.versions()
    healthy = True
    for name, st in infra.status().items():
        if st["answering"]:
            state = "up"
        elif st["running"]:
            state, healthy = "starting/not answering", False
        else:
            state, healthy = "down", False
        pid = f" pid={st['pid']}" if st["pid"] else ""
        print(f"{name:<10} {versions[str(st['kind'])]:<8} {st['address']:<16} {state}{pid}")
    return healthy


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="infra",
        description="Local Cassandra + Kafka for Fanline (no Docker): one node each, "
        "or FANLINE_INFRA_NODES=3 for a three-node cluster of each on 127.0.0.11-13.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="download engine jars with Maven (skipped when cached)")
    p_up = sub.add_parser("up", help="fetch if needed, start both engines, wait until they answer")
    p_up.add_argument("--fresh", action="store_true", help="wipe Cassandra and Kafka data first")
    p_up.add_argument("--only", choices=["cassandra", "kafka"], help="start just one engine")
    p_down = sub.add_parser("down", help="stop the engines (SIGTERM, then SIGKILL after a timeout)")
    p_down.add_argument("--only", choices=["cassandra", "kafka"], help="stop just one engine")
    sub.add_parser("status", help="show state; exit 0 only if both engines answer")
    sub.add_parser("versions", help="print engine versions as JSON")
    p_logs = sub.add_parser("logs", help="print the tail of the engine logs")
    p_logs.add_argument("engine", nargs="?", help="cassandra, kafka or one node (cassandra2, kafka3)")
    p_logs.add_argument("-n", "--lines", type=int, default=LOG_TAIL_LINES)
    sub.add_parser("env", help="print FANLINE_* connection variables (eval-able)")
    p_nt = sub.add_parser("nodetool", help="run Cassandra's nodetool against the local node")
    p_nt.add_argument("--node", type=int, default=1, help="which cluster node (1-based)")
    p_nt.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)

    infra = LocalInfra()
    try:
        if args.cmd == "fetch":
            infra.fetch()
            for engine in infra._engines():
                print(f"{engine.name:<9} {engine.version:<8} {engine.lib_dir}")
        elif args.cmd == "up":
            engines = infra._engines(args.only)
            infra._start(engines, fresh=args.fresh)
            versions = infra.versions()
            for engine in engines:
                secs = infra.startup_seconds.get(engine.name, 0.0)
                how = "reused" if secs == 0.0 else f"started in {secs:.1f}s"
                print(f"{engine.name:<10} {versions[engine.kind]:<8} {engine.address:<16} ({how})")
        elif args.cmd == "down":
            if args.only == "cassandra":
                infra.stop_cassandra()
            elif args.only == "kafka":
                infra.stop_kafka()
            else:
                infra.stop()
            print("stopped")
        elif args.cmd == "status":
            return 0 if _print_status(infra) else 1
        elif args.cmd == "versions":
            print(json.dumps(infra.versions()))
        elif args.cmd == "logs":
            for name, paths in infra.log_paths().items():
                if args.engine is not None and not name.startswith(args.engine):
                    continue
                for path in paths:
                    print(f"==> {path} <==")
                    print("\n".join(_tail(path, args.lines)))
        elif args.cmd == "env":
            print(f"FANLINE_CASSANDRA_CONTACT={infra.cassandra_contact}")
            for key, value in infra.settings_env().items():
                print(f"{key}={value}")
        elif args.cmd == "nodetool":
            return subprocess.call(infra.nodetool_command(*args.args, node=args.node))
    except InfraUnavailable as exc:
        print(f"infra unavailable: {exc}", file=sys.stderr)
        return 3
    except InfraError as exc:
        print(f"infra error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0
