"""`make test`: every test, in three stages, so the soak's ten minutes of
mostly waiting overlap the tests that need no engine.

Stage 1, side by side:
  * everything that needs no real engine (unit, ops, the SQLite side of the
    contract suite, the embedded end-to-end tests), output shown live;
  * the soak (``-m soak``) on the real single-node engines, output kept in
    ``build/test-soak.log`` and shown when the stage ends.
Stage 2: every other single-node real-engine test (contract, end-to-end,
faults), one at a time as before -- the fault tests pause, kill and restart
the shared engines, so nothing else may use them meanwhile.
Stage 3: the three-node cluster's node-loss tests, in a session of their
own once the single-node engines the suite started are stopped: in one
session with the rest they shared two cores with every session-scoped
system still running (the cluster tests took 33 minutes there, 19 alone).

The soak leaves the engines running for stage 2 (``FANLINE_KEEP_INFRA``);
engines the suite started are stopped at the end, engines that were already
running are left alone. The fault table of both stages ends up in
``build/fault-table.md``.

Arguments are passed to pytest. With a marker expression (``-m``) or an
explicit test path the suite is not staged: one plain pytest run.
Exit status: the first failing stage's, 0 if every stage passed (a stage
that selects no test counts as passed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build"
SOAK_LOG = BUILD / "test-soak.log"
FAULT_TABLE = BUILD / "fault-table.md"
SOAK_TABLE = BUILD / "fault-table.soak.md"
NO_TESTS = 5  # pytest's exit status when a selection is empty

NO_ENGINE = "not real_infra and not cluster"
SOAK = "soak"
ENGINES = "real_infra and not cluster and not soak"
CLUSTER = "cluster"


def pytest(args: list[str], marker: str | None = None) -> list[str]:
    return [sys.executable, "-m", "pytest", *(["-m", marker] if marker else []), *args]


def staged(args: list[str]) -> bool:
    """Whether ``args`` leave the selection to the suite (no ``-m``, no path)."""
    for arg in args:
        if arg.startswith("-m"):
            return False
        if not arg.startswith("-") and (REPO / arg.split("::")[0]).exists():
            return False
    return True


def engines_running() -> bool:
    """Whether the launcher knows of a running engine (its state directory)."""
    status = subprocess.run([sys.executable, "deploy/local/infra", "status"], cwd=REPO, capture_output=True, text=True)
    return " pid=" in status.stdout


def stop_engines() -> None:
    """Stop the single-node engines (idempotent)."""
    subprocess.call([sys.executable, "deploy/local/infra", "down"], cwd=REPO, stdout=subprocess.DEVNULL)


def merge_fault_tables() -> None:
    """Stage 2's table plus the soak's row(s), one header."""
    rows: list[str] = []
    header: list[str] = []
    for path in (FAULT_TABLE, SOAK_TABLE):
        if not path.exists():
            continue
        lines = [line for line in path.read_text().splitlines() if line.startswith("|")]
        header = header or lines[:2]
        rows += lines[2:]
    if header:
        FAULT_TABLE.write_text("\n".join(header + rows) + "\n")
    SOAK_TABLE.unlink(missing_ok=True)


def passed(code: int) -> bool:
    return code in (0, NO_TESTS)


def main(args: list[str]) -> int:
    if not staged(args):
        return subprocess.call(pytest(args), cwd=REPO)
    BUILD.mkdir(exist_ok=True)
    for stale in (FAULT_TABLE, SOAK_TABLE):
        stale.unlink(missing_ok=True)
    already = engines_running()
    codes: list[int] = []
    try:
        print(f"== stage 1: tests without engines, beside the soak (its output: {SOAK_LOG.relative_to(REPO)})", flush=True)
        with SOAK_LOG.open("w") as log:
            soak = subprocess.Popen(
                pytest(args, SOAK),
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "FANLINE_KEEP_INFRA": "1", "FANLINE_FAULT_TABLE": str(SOAK_TABLE)},
            )
            try:
                # Never stops the engines either: a test of this selection that
                # reaches for them (through a fixture) must not end the soak's
                # engines at its session's end. In a fresh-clone run stage 1
                # ended 36 s before the soak and its teardown SIGTERMed Kafka
                # under it; run_suite stops the engines itself after stage 2.
                codes.append(subprocess.call(pytest(args, NO_ENGINE), cwd=REPO, env={**os.environ, "FANLINE_KEEP_INFRA": "1"}))
            finally:
                codes.append(soak.wait())
        print(f"== the soak (stage 1), exit status {codes[-1]}:", flush=True)
        sys.stdout.write(SOAK_LOG.read_text())
        print("== stage 2: every other test on the single-node engines", flush=True)
        codes.append(subprocess.call(pytest(args, ENGINES), cwd=REPO))
    finally:
        merge_fault_tables()
        if not already:
            stop_engines()
    print("== stage 3: the three-node cluster", flush=True)
    codes.append(subprocess.call(pytest(args, CLUSTER), cwd=REPO))
    failed = [c for c in codes if not passed(c)]
    print(f"== stages: {', '.join(map(str, codes))} (no engine, soak, single node, cluster)", flush=True)
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
