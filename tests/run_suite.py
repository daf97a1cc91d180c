"""`make test`: every test, scheduled so that waiting overlaps work.

Most of the real-engine time is waiting (a ten-minute soak at a steady
rate, node restarts of the three-node cluster), so the suite runs as a
small pipeline instead of one session:

Phase 1, side by side:
  * everything that needs no real engine (unit, ops, the SQLite side of the
    contract suite, the embedded end-to-end tests), output shown live;
  * the soak (``-m soak``) on the single-node engines, output kept in
    ``build/test-soak.log``;
  * the three-node cluster's tests (``-m cluster``; its own engines on
    127.0.0.11-13 and other ports, its own system on 29000+), output kept in
    ``build/test-cluster.log``. Its load retries each operation for up to a
    minute, so sharing the cores costs it time, not verdicts.
Phase 2, once the soak and the engine-free tests are done, beside the
cluster if it is still running: every single-node real-engine test that
breaks nothing (``real_infra and not fault``): contract, end-to-end,
browser, overload.
Phase 3, alone, once the cluster is done: the single-node fault tests
(``fault``): they pause, kill and slow the shared engines and hold answers
to deadlines, so nothing else may run meanwhile.

``FANLINE_SUITE_SERIAL=1`` runs the same selections one after another
(engine-free beside the soak, then phase 2, phase 3, then the cluster), as
before: for a machine with too little memory for two sets of engines.

The soak leaves the engines running for the later phases
(``FANLINE_KEEP_INFRA``); engines the suite started are stopped at the end,
engines that were already running are left alone. The fault table of the
soak and phase 3 ends up in ``build/fault-table.md``; each phase's wall time
is printed at the end.

Arguments are passed to pytest. With a marker expression (``-m``) or an
explicit test path the suite is not staged: one plain pytest run.
Exit status: the first failing selection's, 0 if every one passed (a
selection with no test counts as passed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build"
SOAK_LOG = BUILD / "test-soak.log"
CLUSTER_LOG = BUILD / "test-cluster.log"
FAULT_TABLE = BUILD / "fault-table.md"
SOAK_TABLE = BUILD / "fault-table.soak.md"
NO_TESTS = 5  # pytest's exit status when a selection is empty

NO_ENGINE = "not real_infra and not cluster"
SOAK = "soak"
ENGINES = "real_infra and not cluster and not soak and not fault"
FAULTS = "real_infra and fault and not cluster and not soak"
CLUSTER = "cluster"

#: Never stop the single-node engines at a session's end: later phases use
#: them (run_suite stops them itself). In a fresh-clone run an engine-free
#: session once ended before the soak and its teardown SIGTERMed Kafka under it.
KEEP = {"FANLINE_KEEP_INFRA": "1"}


def pytest(args: list[str], marker: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-m", marker, "--durations=10", *args]


def staged(args: list[str]) -> bool:
    """Whether ``args`` leave the selection to the suite (no ``-m``, no path)."""
    for arg in args:
        if arg.startswith("-m"):
            return False
        if not arg.startswith("-") and (REPO / arg.split("::")[0]).exists():
            return False
    return True


def engines_running(secure: bool = False) -> bool:
    """Whether the launcher knows of a running engine (its state directory):
    the single-node pair, or with ``secure`` the TLS/auth pair of test_secure."""
    env = {**os.environ, "FANLINE_INFRA_SECURE": "1" if secure else "0"}
    status = subprocess.run([sys.executable, "deploy/local/infra", "status"], cwd=REPO, capture_output=True, text=True, env=env)
    return " pid=" in status.stdout


def fetch_engines(cluster: bool) -> None:
    """Download the engine jars once, before sessions that start engines run
    side by side (two Maven runs filling one empty ~/.m2 at once could clash)."""
    for nodes in ("1", "3") if cluster else ("1",):
        env = {**os.environ, "FANLINE_INFRA_NODES": nodes}
        subprocess.call([sys.executable, "deploy/local/infra", "fetch"], cwd=REPO, env=env)


def stop_engines(secure: bool = False) -> None:
    """Stop the single-node engines, or with ``secure`` the TLS/auth pair (idempotent)."""
    env = {**os.environ, "FANLINE_INFRA_SECURE": "1" if secure else "0"}
    subprocess.call([sys.executable, "deploy/local/infra", "down"], cwd=REPO, stdout=subprocess.DEVNULL, env=env)


def merge_fault_tables() -> None:
    """Phase 3's table plus the soak's row(s), one header."""
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


@dataclass
class Run:
    """One pytest session of the suite: its name, its exit status, its wall time."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path | None = None
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    _sink: IO[bytes] | None = None
    _reported: bool = False

    @classmethod
    def start(cls, name: str, cmd: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> Run:
        sink = log.open("wb") if log is not None else None
        stdout = sink if sink is not None else None
        stderr = subprocess.STDOUT if sink is not None else None
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=stdout, stderr=stderr, env={**os.environ, **(env or {})})
        run = cls(name, proc, log, _sink=sink)
        # When it ended, not when the suite got round to waiting for it.
        threading.Thread(target=run._watch, name=f"watch {name}", daemon=True).start()
        return run

    def _watch(self) -> None:
        self.proc.wait()
        self.ended = time.monotonic()

    def wait(self) -> int:
        code = self.proc.wait()
        if not self._reported:
            self._reported = True
            if self._sink is not None:
                self._sink.close()
            if self.log is not None:
                print(f"== {self.name} (output kept in {self.log.relative_to(REPO)}), exit status {code}:", flush=True)
                sys.stdout.write(self.log.read_text(errors="replace"))
                sys.stdout.flush()
        return code

    def summary(self) -> str:
        took = (self.ended or time.monotonic()) - self.started
        return f"{self.name}: exit {self.proc.returncode}, {took / 60:.1f} min"


def main(args: list[str]) -> int:
    if not staged(args):
        return subprocess.call([sys.executable, "-m", "pytest", *args], cwd=REPO)
    BUILD.mkdir(exist_ok=True)
    for stale in (FAULT_TABLE, SOAK_TABLE):
        stale.unlink(missing_ok=True)
    serial = os.environ.get("FANLINE_SUITE_SERIAL", "").strip() not in ("", "0")
    already = engines_running()
    # test_secure's pair outlives its session too (FANLINE_KEEP_INFRA): stopped here.
    already_secure = engines_running(secure=True)
    runs: list[Run] = []
    cluster: Run | None = None
    t0 = time.monotonic()
    fetch_engines(cluster=not serial)
    try:
        print("== phase 1: tests without engines, beside the soak" + ("" if serial else " and the cluster"), flush=True)
        soak = Run.start("soak", pytest(args, SOAK), {**KEEP, "FANLINE_FAULT_TABLE": str(SOAK_TABLE)}, SOAK_LOG)
        if not serial:
            cluster = Run.start("cluster", pytest(args, CLUSTER), log=CLUSTER_LOG)
        try:
            runs.append(Run.start("no engine", pytest(args, NO_ENGINE), KEEP))
            runs[-1].wait()
        finally:
            runs.append(soak)
            soak.wait()
        print("== phase 2: single-node engine tests that break nothing" + ("" if serial else " (beside the cluster)"), flush=True)
        runs.append(Run.start("single node", pytest(args, ENGINES), KEEP))
        runs[-1].wait()
        if cluster is not None:
            runs.append(cluster)
            cluster.wait()
        print("== phase 3: single-node fault tests, alone", flush=True)
        runs.append(Run.start("faults", pytest(args, FAULTS), KEEP))
        runs[-1].wait()
    finally:
        for run in runs:
            if run.proc.poll() is None:
                run.proc.terminate()
                run.wait()
        if cluster is not None and cluster.proc.poll() is None:
            cluster.proc.terminate()
            cluster.wait()
        merge_fault_tables()
        if not already:
            stop_engines()
        if not already_secure:
            stop_engines(secure=True)
    if serial:
        print("== the three-node cluster", flush=True)
        runs.append(Run.start("cluster", pytest(args, CLUSTER)))
        runs[-1].wait()
    failed = [r.proc.returncode for r in runs if not passed(r.proc.returncode or 0)]
    print(f"== suite: {(time.monotonic() - t0) / 60:.1f} min; " + "; ".join(r.summary() for r in runs), flush=True)
    return failed[0] if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
