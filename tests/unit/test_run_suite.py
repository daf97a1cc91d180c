"""tests/run_suite.py: which arguments keep `make test` staged, the order of
its sessions, and the fault tables of the soak and the fault phase merged."""

from __future__ import annotations

from pathlib import Path

import pytest

import run_suite  # tests/run_suite.py: pytest puts tests/ on the path (rootdir of the `unit` package)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], True),
        (["--durations=50", "-x", "-k", "timeline"], True),
        (["-m", "fault"], False),
        (["-mfault"], False),
        (["tests/unit"], False),
        (["tests/e2e/test_soak.py::test_soak"], False),
    ],
)
def test_only_an_unselected_run_is_staged(args: list[str], expected: bool) -> None:
    assert run_suite.staged(args) is expected


def test_the_soaks_rows_join_stage_twos_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    main, soak = tmp_path / "fault-table.md", tmp_path / "fault-table.soak.md"
    monkeypatch.setattr(run_suite, "FAULT_TABLE", main)
    monkeypatch.setattr(run_suite, "SOAK_TABLE", soak)
    header = "| fault | sent |\n|---|---:|\n"
    main.write_text(header + "| worker killed | 10 |\n")
    soak.write_text(header + "| soak | 600 |\n")
    run_suite.merge_fault_tables()
    assert main.read_text() == header + "| worker killed | 10 |\n| soak | 600 |\n"
    assert not soak.exists()
    soak.write_text(header + "| soak | 7 |\n")
    main.unlink()
    run_suite.merge_fault_tables()  # stage 2 wrote nothing: the soak's table alone
    assert main.read_text() == header + "| soak | 7 |\n"


class FakePopen:
    """Records each session's marker, environment, and when it started and
    was waited for, on a shared timeline."""

    timeline: list[str] = []
    envs: dict[str, dict[str, str]] = {}

    def __init__(self, argv: list[str], **kw: object) -> None:
        self.marker = argv[4]  # python -m pytest -m MARKER ...
        self.returncode: int | None = None
        FakePopen.envs[self.marker] = kw["env"]  # type: ignore[assignment]
        FakePopen.timeline.append(f"start {self.marker}")

    def wait(self) -> int:
        if self.returncode is None:
            FakePopen.timeline.append(f"end {self.marker}")
            self.returncode = 0
        return 0

    def poll(self) -> int | None:
        return self.returncode


@pytest.fixture
def fake_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> type[FakePopen]:
    FakePopen.timeline, FakePopen.envs = [], {}
    for name in ("BUILD", "REPO"):
        monkeypatch.setattr(run_suite, name, tmp_path)
    for name, file in (("SOAK_LOG", "soak.log"), ("CLUSTER_LOG", "c.log"), ("FAULT_TABLE", "f.md"), ("SOAK_TABLE", "s.md")):
        monkeypatch.setattr(run_suite, name, tmp_path / file)
    monkeypatch.setattr(run_suite, "engines_running", lambda secure=False: False)
    monkeypatch.setattr(run_suite, "fetch_engines", lambda cluster: None)
    monkeypatch.setattr(
        run_suite, "stop_engines", lambda secure=False: FakePopen.timeline.append("stop secure" if secure else "stop")
    )
    monkeypatch.setattr(run_suite.subprocess, "Popen", FakePopen)
    monkeypatch.setattr(run_suite.Run, "_watch", lambda self: None)  # the timeline records the suite's waits
    return FakePopen


def test_the_fault_tests_run_alone_after_everything_else(fake_suite: type[FakePopen]) -> None:
    """The cluster and the soak start beside the engine-free tests; the
    single-node tests that break nothing follow the soak; the fault tests
    start only once every other session has ended; the engines stop once,
    at the end."""
    r = run_suite
    assert r.main([]) == 0
    t = fake_suite.timeline
    assert t[:3] == [f"start {r.SOAK}", f"start {r.CLUSTER}", f"start {r.NO_ENGINE}"]
    assert t.index(f"start {r.ENGINES}") > max(t.index(f"end {r.SOAK}"), t.index(f"end {r.NO_ENGINE}"))
    assert t.index(f"start {r.FAULTS}") > max(t.index(f"end {m}") for m in (r.SOAK, r.NO_ENGINE, r.ENGINES, r.CLUSTER))
    assert t[-3:] == [f"end {r.FAULTS}", "stop", "stop secure"]


def test_no_session_may_stop_the_shared_engines(fake_suite: type[FakePopen]) -> None:
    """Sessions on the single-node engines run at once or one after the
    other; none may stop the engines at its end (FANLINE_KEEP_INFRA), the
    suite stops them once."""
    run_suite.main([])
    for marker in (run_suite.SOAK, run_suite.NO_ENGINE, run_suite.ENGINES, run_suite.FAULTS):
        assert fake_suite.envs[marker].get("FANLINE_KEEP_INFRA") == "1", marker
    assert fake_suite.timeline.count("stop") == 1


def test_serial_runs_the_cluster_last_once_the_engines_are_stopped(
    fake_suite: type[FakePopen], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FANLINE_SUITE_SERIAL", "1")
    run_suite.main([])
    t = fake_suite.timeline
    assert t[-4:] == ["stop", "stop secure", f"start {run_suite.CLUSTER}", f"end {run_suite.CLUSTER}"]


def test_the_selections_cover_every_test_once() -> None:
    """Each combination of the markers that decide the split lands in exactly one session."""
    import itertools

    r = run_suite
    sessions = (r.NO_ENGINE, r.SOAK, r.ENGINES, r.FAULTS, r.CLUSTER)
    for real, fault, soak, cluster in itertools.product((False, True), repeat=4):
        if soak and (cluster or not (real and fault)):
            continue  # the soak is always a single-node real-engine fault test
        names = {"real_infra": real, "fault": fault, "soak": soak, "cluster": cluster}
        hits = [m for m in sessions if eval(m, {}, names)]  # our own marker expressions
        assert len(hits) == 1, (names, hits)
