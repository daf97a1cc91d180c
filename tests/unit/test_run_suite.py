"""tests/run_suite.py: which arguments keep `make test` staged, and the
fault table of both stages merged under one header."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import run_suite


@pytest.mark.parametrize(("args", "expected"), [
    ([], True),
    (["--durations=50", "-x", "-k", "timeline"], True),
    (["-m", "fault"], False),
    (["-mfault"], False),
    (["tests/unit"], False),
    (["tests/e2e/test_soak.py::test_soak"], False),
])
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
