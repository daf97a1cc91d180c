"""tests/run_suite.py: which arguments keep `make test` staged, and the
fault table of both stages merged under one header."""

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


def test_no_stage_beside_the_soak_may_stop_the_engines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage 1 and the soak run at once; whichever session ends first must
    leave the engines to the other (FANLINE_KEEP_INFRA), and the suite stops
    them once, after stage 2."""
    envs: dict[str, dict[str, str] | None] = {}
    calls: list[str] = []

    class FakeSoak:
        def __init__(self, argv: list[str], **kw: object) -> None:
            envs["soak"] = kw.get("env")  # type: ignore[assignment]

        def wait(self) -> int:
            return 0

    def call(argv: list[str], **kw: object) -> int:
        marker = argv[4] if argv[3:4] == ["-m"] else ""  # python -m pytest -m MARKER ...
        envs[marker] = kw.get("env")  # type: ignore[assignment]
        calls.append(marker)
        return 0

    monkeypatch.setattr(run_suite, "BUILD", tmp_path)
    monkeypatch.setattr(run_suite, "REPO", tmp_path)
    monkeypatch.setattr(run_suite, "SOAK_LOG", tmp_path / "soak.log")
    monkeypatch.setattr(run_suite, "FAULT_TABLE", tmp_path / "f.md")
    monkeypatch.setattr(run_suite, "SOAK_TABLE", tmp_path / "s.md")
    monkeypatch.setattr(run_suite, "engines_running", lambda: False)
    monkeypatch.setattr(run_suite, "stop_engines", lambda: calls.append("stop"))
    monkeypatch.setattr(run_suite.subprocess, "Popen", FakeSoak)
    monkeypatch.setattr(run_suite.subprocess, "call", call)
    assert run_suite.main([]) == 0
    assert calls == [run_suite.NO_ENGINE, run_suite.ENGINES, "stop", run_suite.CLUSTER]
    assert (envs["soak"] or {}).get("FANLINE_KEEP_INFRA") == "1"
    assert (envs[run_suite.NO_ENGINE] or {}).get("FANLINE_KEEP_INFRA") == "1"
