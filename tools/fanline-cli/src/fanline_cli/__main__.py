"""``fanline``: the operator's command line.

    fanline migrate [--service social-graph|tweet-store]
    fanline topics ensure|verify
    fanline dlq inspect [--limit N] [--json]
    fanline dlq replay [--limit N] [--reason R] [--dry-run]
    fanline rebuild-home USERNAME
    fanline sample-data --users N --follows-per-user K --tweets-per-user M [--api URL]
    fanline backup DIR [--service social-graph|tweet-store]
    fanline restore DIR [--replace] [--service social-graph|tweet-store]

Settings come from the same environment variables as the services
(``FANLINE_BACKEND``, ``FANLINE_CASSANDRA_*``, ``FANLINE_KAFKA_BOOTSTRAP``,
``FANLINE_EVENTS_TOPIC``, ``FANLINE_DLQ_TOPIC``, ``FANLINE_SOCIAL_GRAPH_URL``,
``FANLINE_TWEET_STORE_URL``, ...; README.md lists them), read once here and
passed down. Exit codes: 0 done, 1 a check failed (``topics verify``),
2 a dependency was unavailable or refused the request.
See docs/operations/cli.md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import os
import secrets
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from fanline_shared.config import ConfigError, Env, KafkaSettings, PeerSettings, StorageSettings
from fanline_shared.errors import DomainError

from . import __version__

STORAGE_SERVICES = ("social-graph", "tweet-store")


async def _migrate(environ: Mapping[str, str], services: Sequence[str]) -> None:
    # The services' own code paths, so the CLI can never drift from them.
    for service in services:
        module = "fanline_" + service.replace("-", "_")
        if importlib.util.find_spec(module) is None:
            raise ConfigError(
                f"fanline migrate needs the {service} package ({module}): pip install 'fanline-cli[migrate]', "
                "or run the service image's `migrate` (the Kubernetes migrate Jobs do)"
            )
    from fanline_social_graph.__main__ import SERVICE as SOCIAL_GRAPH
    from fanline_tweet_store.__main__ import SERVICE as TWEET_STORE

    for service in services:
        backend = await (SOCIAL_GRAPH if service == "social-graph" else TWEET_STORE).migrate_from_env(environ)
        print(f"{service}: schema up to date ({backend})")


def cmd_migrate(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    services = [args.service] if args.service else list(STORAGE_SERVICES)
    asyncio.run(_migrate(environ, services))
    return 0


def cmd_topics(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from . import topics

    settings = KafkaSettings.from_env(Env(environ))
    action = topics.ensure if args.action == "ensure" else topics.verify
    reports = asyncio.run(action(settings))
    for report in reports:
        print(report.line())
    return 0 if all(r.ok for r in reports) else 1


def cmd_dlq(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from . import dlq

    settings = KafkaSettings.from_env(Env(environ))
    letters = asyncio.run(dlq.read(settings, None if args.action == "replay" and args.reason else args.limit))
    if args.action == "inspect":
        for letter in letters:
            print(json.dumps(letter.as_json()) if args.json else letter.text())
        if not args.json:
            print(f"{len(letters)} dead-lettered message(s) in {settings.dlq_topic}", file=sys.stderr)
        return 0
    if args.reason:
        letters = [d for d in letters if d.reason == args.reason]
        if args.limit is not None:
            letters = letters[: args.limit]
    for letter in letters:
        verb = "would replay" if args.dry_run else "replaying"
        print(
            f"{verb} partition {letter.partition} offset {letter.offset} "
            f"(reason {letter.reason or '?'}) -> {settings.events_topic}"
        )
    if args.dry_run:
        print(f"dry run: {len(letters)} message(s) not replayed", file=sys.stderr)
        return 0
    count = asyncio.run(dlq.replay(settings, letters))
    print(f"replayed {count} message(s) to {settings.events_topic}", file=sys.stderr)
    return 0


def cmd_rebuild_home(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from .rebuild import rebuild_home

    peers = PeerSettings.from_env(Env(environ))
    result = asyncio.run(rebuild_home(peers, args.username, page_size=args.page_size, concurrency=args.concurrency))
    print(
        f"rebuilt the home timeline of {result.username}: {result.merged} row(s) merged "
        f"from {result.authors} author(s) (followees and the user)"
    )
    return 0


def cmd_sample_data(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from .sample_data import generate

    prefix = args.prefix if args.prefix is not None else f"s{secrets.token_hex(2)}_"
    result = asyncio.run(
        generate(
            args.api or environ.get("FANLINE_API_URL", "http://127.0.0.1:8000"),
            users=args.users,
            follows_per_user=args.follows_per_user,
            tweets_per_user=args.tweets_per_user,
            prefix=prefix,
            password=args.password,
            concurrency=args.concurrency,
            seed=args.seed,
            progress=not args.quiet,
        )
    )
    print(result.summary())
    return 0


def cmd_backup(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from .backup import BackupError, backup, restore

    settings = StorageSettings.from_env(Env(environ))
    services = [args.service] if args.service else list(STORAGE_SERVICES)
    try:
        if args.command == "backup":
            reports = backup(settings, services, Path(args.directory))
        else:
            reports = restore(settings, services, Path(args.directory), replace=args.replace)
    except BackupError as exc:
        print(f"fanline {args.command}: {exc}", file=sys.stderr)
        return 1
    verb = "backed up" if args.command == "backup" else "restored"
    for report in reports:
        print(report.line(verb))
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fanline", description="Fanline operator commands (docs/operations/cli.md).")
    p.add_argument("--version", action="version", version=f"fanline {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    m = sub.add_parser("migrate", help="create or migrate the storage services' schemas (idempotent)")
    m.add_argument("--service", choices=STORAGE_SERVICES, help="only this service (default: both)")
    m.set_defaults(func=cmd_migrate)

    t = sub.add_parser("topics", help="create (ensure) or check (verify) the events and dead-letter topics")
    t.add_argument("action", choices=("ensure", "verify"))
    t.set_defaults(func=cmd_topics)

    d = sub.add_parser("dlq", help="inspect or replay the dead-letter topic (commits no offsets)")
    d.add_argument("action", choices=("inspect", "replay"))
    d.add_argument("--limit", type=_positive, help="at most this many messages (oldest first)")
    d.add_argument("--json", action="store_true", help="inspect: one JSON object per line")
    d.add_argument("--reason", help="replay: only messages whose error.reason is this (e.g. error, unavailable)")
    d.add_argument("--dry-run", action="store_true", help="replay: list what would be replayed, send nothing")
    d.set_defaults(func=cmd_dlq)

    r = sub.add_parser("rebuild-home", help="rebuild one user's home timeline from follows and userlines")
    r.add_argument("username")
    r.add_argument("--page-size", type=_positive, default=1000, help="followees fetched per page")
    r.add_argument("--concurrency", type=_positive, default=8, help="merges in flight")
    r.set_defaults(func=cmd_rebuild_home)

    s = sub.add_parser("sample-data", help="Twissandra-style sample users, follows and tweets via the public API")
    s.add_argument("--users", type=_positive, required=True)
    s.add_argument("--follows-per-user", type=_non_negative, required=True)
    s.add_argument("--tweets-per-user", type=_non_negative, required=True)
    s.add_argument("--api", help="public API base URL (default: $FANLINE_API_URL or http://127.0.0.1:8000)")
    s.add_argument("--prefix", help="username prefix (default: a random s<hex>_)")
    s.add_argument("--password", default="sample-password", help="password of every sample user")
    s.add_argument("--concurrency", type=_positive, default=16, help="requests in flight")
    s.add_argument("--seed", type=int, help="random seed, for a repeatable follow graph and texts")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_sample_data)

    b = sub.add_parser("backup", help="copy the storage services' data (either backend) into a new directory")
    b.add_argument("directory", help="where to write the backup (absent or empty)")
    b.add_argument("--service", choices=STORAGE_SERVICES, help="only this service (default: both)")
    b.set_defaults(func=cmd_backup)

    rs = sub.add_parser("restore", help="write a backup into this deployment (stop social-graph and tweet-store first)")
    rs.add_argument("directory", help="a directory `fanline backup` wrote")
    rs.add_argument("--service", choices=STORAGE_SERVICES, help="only this service (default: both)")
    rs.add_argument("--replace", action="store_true", help="drop the existing keyspaces or files first")
    rs.set_defaults(func=cmd_backup)
    return p


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = parser().parse_args(argv)
    env = os.environ if environ is None else environ
    logging.basicConfig(
        level=env.get("FANLINE_LOG_LEVEL", "WARNING").upper(), format="%(asctime)s fanline %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("aiokafka", "kafka", "httpx", "httpcore", "cassandra"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        code: int = args.func(args, env)
    except (DomainError, ConfigError, RuntimeError) as exc:
        print(f"fanline {args.command}: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
