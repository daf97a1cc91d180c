"""The benchmark harness's outputs, from a fake result (no engines, no processes):
the JSON writer keeps every key of issue 4's schema, the targets are judged
right, and the markdown page and plots render."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench import openloop, prometheus, report, results, stats  # noqa: E402

# The issue's schema, spelled out independently of bench/results.py.
ISSUE_KEYS = {
    "machine": None,
    "versions": None,
    "post_latency_ms": {
        side: {n: {"p50": None, "p99": None} for n in ("0", "100", "1000", "10000")} for side in ("ours", "sync_baseline")
    },
    "fanout_rows_per_s": {"worker": None, "bare_driver": None, "cassandra_stress_ops": None},
    "delivery_lag_ms": {"followers": None, "rate_per_s": None, "p50": None, "p99": None},
    "timeline_read_ms": {"api": {"p50": None, "p99": None}, "raw": {"p50": None, "p99": None}, "rate_per_s": None},
    "scaling_rows_per_s": {"1": None, "2": None, "4": None, "cores": None},
    "peak_rss_mb": {"api": None, "social-graph": None, "tweet-store": None, "fanout-worker": None},
    # issue 16
    "streams": {
        "streams": None,
        "rate_per_s": None,
        "update_latency_ms": {"p50": None, "p99": None},
        "kib_per_idle_stream": None,
        "idle_heartbeat_cpu_percent": None,
    },
}


# Issue 13's additions (the celebrity and latency-bound scaling phases).
ISSUE13_KEYS = {
    "celebrity": {
        "threshold": None,
        "hybrid_on": None,
        "hybrid_off": None,
        "home_read_ms": {g: {"p50": None, "p99": None} for g in ("0", "10", "100")},
        "crossover_followers": None,
    },
    "latency_scaling": {
        "rows_per_s": {"1": None, "2": None, "4": None},
        "ratio_vs_1": {"2": None, "4": None},
        "delay_ms_each_way": None,
        "cpu_s_per_1k_rows": None,
    },
}


# Issue 18's additions (the open-loop mixed workload), spelled out independently too.
STEP = {
    "rate_per_s": None,
    "achieved_rate_per_s": None,
    "client": None,
    "delivery_lag_ms": None,
    "cpu_s_per_1k_requests": None,
    "generator": None,
}
ISSUE18_KEYS = {
    "mixed_load": STEP,
    "mixed_embedded": STEP,
    "saturation": {"capacity_per_s": None, "capacity_accepted_p99_ms": None, "steps": None},
    "overload": {
        "rate_per_s": None,
        "capacity_accepted_p99_ms": None,
        "accepted_p99_ms": None,
        "refused": None,
        "refused_max_ms": None,
        "errors": None,
    },
}
# Issue 18's additions: repeated ratios, the fair baselines, the post phase's
# delivered rows and the delivery lag with reads running.
_RATIO = {"median": None, "min": None, "max": None, "n": None}
ISSUE18_FAIR_KEYS = {
    "ratios": {
        r: dict(_RATIO)
        for r in (
            "worker_vs_ceiling",
            "sync_vs_ours_p99_10000",
            "post_p99_10000_vs_0",
            "post_p99_running_vs_stopped",
            "fanout_speed_during_posts_vs_idle",
            "read_p50_vs_raw_cached",
            "read_p50_vs_raw_uncached",
        )
    },
    "fair": {
        "ceiling_rows_per_s": None,
        "worker_rows_per_s": None,
        "stress_rows_per_s": None,
        "timeline_read_ms": {s: {"p50": None, "p99": None} for s in ("api", "raw_cached", "raw_uncached")},
    },
    "fanout_rows_per_s": {"cassandra_stress_rows": None},
    "post_fanout": {"offered_rows": None, "delivered_rows": None, "lag_ms": None},
    "delivery_lag_reads_ms": {
        "followers": None,
        "rate_per_s": None,
        "reads_per_s": None,
        "reads_per_s_achieved": None,
        "p50": None,
        "p99": None,
    },
}


def issue_paths(tree: dict[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for key, sub in tree.items():
        path = f"{prefix}{key}"
        paths += issue_paths(sub, path + ".") if isinstance(sub, dict) else [path]
    return paths


def fake_step(rate: float, post_ms: float, lag_ms: float, refused: int = 0, held: bool = True) -> dict[str, Any]:
    """One open-loop step as workload.run_step records it, from synthetic outcomes."""
    outcomes = [
        openloop.Outcome(int(i * 1e9 / rate), 200, post_ms if route == "post" else 5.0, route, False)
        for i, route in enumerate(["post", "home", "home", "userline", "sign_in"] * int(rate))
    ]
    outcomes += [openloop.Outcome(0, 503, 20.0, "home", True)] * refused
    return {
        "rate_per_s": rate,
        "duration_s": 5,
        "achieved_rate_per_s": rate,
        "client": openloop.summarize(outcomes),
        "server": {
            "gateway_route_ms": {"post": {"p50": 4.0, "p99": post_ms}},
            "admission": {"api": {"shed": refused, "queue_wait_p99_ms": 1.0}},
        },
        "delivery_lag_ms": {"p50": lag_ms / 2, "p99": lag_ms, "tweets": int(rate)},
        "cpu_s_per_1k_requests": {"api": 1.5, "tweet-store": 1.0, "total": 2.5},
        "generator": {"tool": "vegeta v12.12.0", "cpu_s": 0.4, "cpu_s_per_1k_requests": 0.08, "wall_s": 5.0},
        "held": held,
        "verdict": "held" if held else "post p99 150 ms > 100 ms",
    }


def fake_result(**overrides: Any) -> dict[str, Any]:
    doc = results.empty_result()
    doc["machine"] = {
        "cores": 2,
        "cpu_model": "test CPU",
        "memory_gb": 8.0,
        "platform": "Linux",
        "load_average": {"min": 1.0, "mean": 2.0, "max": 3.0, "samples": 10},
    }
    doc["versions"] = {"cassandra": "5.0.9", "kafka": "4.1.1", "python": "3.11.7"}
    for i, n in enumerate(results.FOLLOWER_COUNTS):
        doc["post_latency_ms"]["ours"][n] = {"p50": 20.0, "p99": 40.0 + i}
        doc["post_latency_ms"]["sync_baseline"][n] = {"p50": 25.0 * 10**i, "p99": 50.0 * 10**i}
    doc["fanout_rows_per_s"] = {
        "worker": 8000.0,
        "bare_driver": 10000.0,
        "cassandra_stress_ops": None,
        "cassandra_stress_rows": None,
    }
    # issue 18: the ratio targets are judged on the median of repeated, interleaved ratios
    enough = {"n": 3, "min_samples": 300, "enough_samples": True}
    doc["ratios"].update(
        worker_vs_ceiling={"median": 0.95, "min": 0.9, "max": 1.0, "values": [0.9, 0.95, 1.0], "n": 3},
        sync_vs_ours_p99_10000={"median": 1162.0, "min": 1000.0, "max": 1200.0, **enough},
        post_p99_10000_vs_0={"median": 1.07, "min": 1.0, "max": 1.6, **enough},
        read_p50_vs_raw_cached={
            "median": 2.25,
            "min": 2.0,
            "max": 2.5,
            "n": 3,
            "min_samples": 60,
            "enough_samples": False,
        },  # a p50: judged however few the samples
    )
    doc["delivery_lag_ms"] = {"followers": 1000, "rate_per_s": 2.0, "p50": 400.0, "p99": 2500.0}
    doc["timeline_read_ms"] = {"api": {"p50": 9.0, "p99": 30.0}, "raw": {"p50": 4.0, "p99": 10.0}, "rate_per_s": 50}
    doc["scaling_rows_per_s"] = {"1": 8000.0, "2": 9000.0, "4": 9500.0, "cores": 2}
    doc["peak_rss_mb"] = {"api": 60.0, "social-graph": 70.0, "tweet-store": 80.0, "fanout-worker": 90.0}
    per_count = {"post_p99_ms": 60.0, "ordinary_lag_p99_ms": 900.0, "rows_written": 10, "stored_rows_max_of_sampled": 12}
    doc["celebrity"] = {
        "threshold": 10000,
        "hybrid_off": {
            "1000": {**per_count, "readable_last_follower_s": 0.4},
            "1000000": {**per_count, "readable_last_follower_s": 90.0, "ordinary_lag_p99_ms": 40000.0},
            "largest_partition_bytes": 50000,
        },
        "hybrid_on": {
            "1000": {**per_count, "readable_last_follower_s": 0.4},
            "1000000": {**per_count, "readable_last_follower_s": 0.8, "ordinary_lag_p99_ms": 1500.0},
            "largest_partition_bytes": 40000,
        },
        "home_read_ms": {"0": {"p50": 8.0, "p99": 20.0}, "10": {"p50": 9.0, "p99": 30.0}, "100": {"p50": 15.0, "p99": 60.0}},
        "crossover_followers": 4000,
        "crossover": {"followers": 4000, "text": "they cross at 4,000 followers"},
    }
    doc["latency_scaling"] = {
        "delay_ms_each_way": 5.0,
        "rtt_ms": {"direct": 0.5, "proxied": 10.6},
        "rows_per_s": {"1": 1000.0, "2": 1900.0, "4": 3000.0},
        "ratio_vs_1": {"2": 1.9, "4": 3.0},
        "cpu_s_per_1k_rows": {"fanout-worker": 0.1},
        "cores": 2,
    }
    doc["streams"] = {
        "streams": 1000,
        "rate_per_s": 5.0,
        "update_latency_ms": {"p50": 120.0, "p99": 1500.0},
        "kib_per_idle_stream": 30.0,
        "idle_heartbeat_cpu_percent": 1.5,
    }
    steps = [fake_step(20, 30.0, 400.0), fake_step(40, 60.0, 900.0), fake_step(80, 150.0, 3000.0, held=False)]
    doc["saturation"] = {"capacity_per_s": 40.0, "capacity_accepted_p99_ms": 60.0, "steps": steps}
    doc["mixed_load"] = {**fake_step(30, 40.0, 500.0), "users": 300, "method": "Open loop: vegeta."}
    doc["overload"] = {
        **fake_step(80, 90.0, 1500.0, refused=30),
        "capacity_per_s": 40.0,
        "capacity_accepted_p99_ms": 60.0,
        "accepted_p99_ms": 90.0,
        "refused": 30,
        "refused_max_ms": 45.0,
        "refused_without_retry_after": 0,
        "errors": 0,
    }
    doc["mixed_embedded"] = {**fake_step(10, 20.0, 300.0), "users": 20}
    doc["details"] = {
        "latency_scaling": {
            "runs": {
                "1": {
                    "machine_cpu_utilisation": 0.5,
                    "cpu_bound": False,
                    "cpu_s_per_1k_rows": {"fanout-worker": 0.1, "tweet-store": 0.2},
                },
                "4": {
                    "machine_cpu_utilisation": 0.95,
                    "cpu_bound": True,
                    "cpu_s_per_1k_rows": {"fanout-worker": 0.12, "tweet-store": 0.25},
                },
                "1 again": {"rows_per_s": 900.0, "cpu_bound": False},
            }
        },
        "mode": "quick",
        "started_at": "2026-11-22 03:00 UTC",
        "duration_s": 123.0,
        "delivery_lag": {"samples_ms": [300.0, 400.0, 450.0, 2500.0], "tweets": 4, "summary": {"max": 2500.0}},
        "fanout": {
            "stress_note": "cassandra-stress was not available.",
            "bare_driver_tuning": [{"path": "driver", "concurrency": 64, "rows": 100, "rows_per_s": 9000.0}],
        },
        "profile": {
            "services": {
                "api": {
                    "samples": 10,
                    "categories": [{"name": "starlette", "percent": 50.0}],
                    "top_self": [{"function": "f (x.py)", "percent": 50.0}],
                }
            },
            "findings": ["**api**: starlette 50 %"],
        },
        "seeding": "bulk-loaded followers",
        "notes": ["a note"],
    }
    doc.update(overrides)
    return doc


def test_schema_covers_every_key_of_the_issue() -> None:
    assert set(issue_paths(ISSUE_KEYS)) | set(issue_paths(ISSUE13_KEYS)) | set(issue_paths(ISSUE18_KEYS)) | set(
        issue_paths(ISSUE18_FAIR_KEYS)
    ) == set(results.SCHEMA)
    assert results.missing_keys(results.empty_result()) == []


def test_writer_produces_every_key_latest_and_dated(tmp_path: Path) -> None:
    doc = results.finalize(fake_result())
    latest, dated = results.write_results(doc, tmp_path, datetime(2026, 11, 22, 4, 5))
    assert latest.name == "latest.json"
    assert dated.name == "2026-11-22T0405.json"
    for path in (latest, dated):
        written = json.loads(path.read_text())
        assert results.missing_keys(written) == []
        for key in issue_paths(ISSUE_KEYS):
            assert results.get(written, key) is not None or key == "fanout_rows_per_s.cassandra_stress_ops", key
        assert written["fanout_rows_per_s"]["cassandra_stress_ops"] is None  # unmeasured stays null
    assert json.loads(latest.read_text()) == json.loads(dated.read_text())


def test_writer_refuses_a_document_missing_a_key(tmp_path: Path) -> None:
    doc = fake_result()
    del doc["scaling_rows_per_s"]["4"]
    with pytest.raises(ValueError, match=r"scaling_rows_per_s\.4"):
        results.write_results(doc, tmp_path, datetime(2026, 1, 1))
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("post_p99_flat", True),  # median 1.07 <= 1.5 (one round at 1.6 does not decide it)
        ("sync_ratio", True),  # median 1162 >= 50
        ("worker_vs_driver", True),  # median 0.95 >= 0.9 of the fair ceiling
        ("read_vs_raw", False),  # median 2.25 > 1.5 x the cached raw read
        ("lag_p99", False),  # 2500 > 2000
        ("celebrity_readable_1s", True),  # 0.8 s at 1,000,000 followers, hybrid on
        ("celebrity_ordinary_lag", True),  # 1500 <= 2000
        ("celebrity_ordinary_lag_push", False),  # 40000 > 2000 with hybrid off
        ("home_read_large", True),  # 30 <= 2 * 20
        ("threshold_crossover", True),  # 10,000 / 4,000 = 2.5 <= 3
        ("latency_scaling_2", True),  # 1.9 >= 1.8
        ("latency_scaling_4", False),  # 3.0 < 3.2
        ("stream_p99", False),  # 1500 > 1000
        ("stream_memory", True),  # 30 <= 50
    ],
)
def test_targets_are_judged_from_the_same_document(key: str, expected: bool) -> None:
    targets = {t.key: t for t in results.evaluate_targets(fake_result())}
    assert targets[key].passed is expected


def test_issue13_targets_use_the_largest_count_measured() -> None:
    doc = fake_result()
    del doc["celebrity"]["hybrid_on"]["1000000"]  # a --quick run: 1,000 is the largest on this side
    targets = {t.key: t for t in results.evaluate_targets(doc)}
    assert targets["celebrity_readable_1s"].measured == 0.4
    assert "1,000 followers" in targets["celebrity_readable_1s"].measured_label
    doc["celebrity"]["crossover_followers"] = 1000  # 10,000 is 10x the crossover
    assert {t.key: t for t in results.evaluate_targets(doc)}["threshold_crossover"].passed is False
    empty = {t.key: t.passed for t in results.evaluate_targets(results.empty_result())}
    assert all(empty[k] is None for k in ("celebrity_readable_1s", "home_read_large", "threshold_crossover", "latency_scaling_2"))


def test_unmeasured_target_is_neither_pass_nor_fail() -> None:
    doc = fake_result()
    doc["ratios"]["worker_vs_ceiling"]["median"] = None
    targets = {t.key: t for t in results.evaluate_targets(doc)}
    assert targets["worker_vs_driver"].passed is None
    assert results.finalize(doc)["targets"]["worker_vs_driver"]["pass"] is None


def test_markdown_renders_tables_targets_and_plot_links() -> None:
    md = report.render_markdown(fake_result(), {"post_latency": "benchmarks/post_latency.png"})
    assert md.startswith("# Benchmarks")
    for heading in (
        "## Targets",
        "## 1. Post latency vs followers",
        "## 2. Fan-out throughput",
        "## 3. Scaling",
        "## 4. Delivery lag",
        "## 5. Read path",
        "## 5b. Live streams",
        "## 6. Memory",
        "## 7. Celebrity",
        "## 8. Scaling where latency-bound",
        "## Profile (py-spy)",
    ):
        assert heading in md
    assert "| on | 1,000,000 | — | 60.0 |" in md and "| off | 1,000,000 |" in md  # posts: not in the fake
    assert "they cross at 4,000 followers" in md
    assert "**CPU-bound**" in md and "| 4 + 4 | 3,000 | 3.0× |" in md
    assert "| 1 + 1 again | 900 | 0.9× |" in md  # the run order, each run's own rate
    assert "![post latency vs followers](benchmarks/post_latency.png)" in md
    assert "**FAIL**" in md and "**pass**" in md
    assert "cassandra-stress was not available." in md
    assert "10,000" in md and "8,000" in md  # figures formatted with separators


def test_markdown_survives_an_empty_result() -> None:
    md = report.render_markdown(results.empty_result())
    assert "not measured" in md
    # the celebrity, latency-scaling and open-loop sections
    assert md.count("Not measured in this run.") == 3


@pytest.mark.slow  # matplotlib takes ~10 s on a loaded 2-core machine
def test_plots_are_written(tmp_path: Path) -> None:
    made = report.make_plots(fake_result(), tmp_path)
    assert set(made) == set(report.PLOTS)
    for path in made.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [([1.0], 99, 1.0), ([1.0, 2.0, 3.0, 4.0], 50, 2.5), (list(range(1, 101)), 99, 99.01), ([5.0, 1.0], 0, 1.0)],
)
def test_percentile_matches_linear_interpolation(values: list[float], q: float, expected: float) -> None:
    assert stats.percentile(values, q) == pytest.approx(expected)


def test_p50_p99_of_nothing_is_null() -> None:
    assert stats.p50_p99([]) is None


def test_histogram_means_count_the_samples_over_25_ms_of_each_series() -> None:
    # prometheus-client's own order: ``le`` sorted among the other labels.
    before = {
        'm_sum{route="/a",service="api"}': 0.5,
        'm_count{route="/a",service="api"}': 5.0,
        'm_bucket{le="0.025",route="/a",service="api"}': 5.0,
    }
    after = {
        'm_sum{route="/a",service="api"}': 1.5,
        'm_count{route="/a",service="api"}': 15.0,
        'm_bucket{le="0.025",route="/a",service="api"}': 12.0,
        'm_sum{route="/b",service="api"}': 1.0,
        'm_count{route="/b",service="api"}': 4.0,
        'm_bucket{le="0.025",route="/b",service="api"}': 4.0,
        "m_sum": 2.0,
        "m_count": 4.0,
        'm_bucket{le="0.025"}': 1.0,
    }
    rows = {r["series"]: r for r in prometheus.histogram_means(before, after, "m")}
    assert rows['m{route="/a",service="api"}'] == {
        "series": 'm{route="/a",service="api"}',
        "count": 10,
        "mean_ms": 100.0,
        "over_25ms": 3,
    }
    assert rows['m{route="/b",service="api"}']["over_25ms"] == 0
    assert rows["m"]["over_25ms"] == 3


def test_markdown_tabulates_the_delivery_lag_sweep() -> None:
    doc = fake_result()
    doc["details"]["delivery_lag_sweep"] = {
        "runs": [
            {"rate_per_s": 0.5, "tweets": 60, "complete": 60, "summary": {"p50": 200.0, "p99": 240.0, "max": 250.0}},
            {"rate_per_s": 4.0, "tweets": 240, "complete": 238, "summary": {"p50": 5000.0, "p99": 9100.0, "max": 9500.0}},
        ],
        "method": "the sweep's method",
    }
    md = report.render_markdown(doc)
    assert "Delivery lag vs posting rate" in md
    assert "| 4.00 | 4,004 | 240 (238) | 5,000 | 9,100 | 9,500 |" in md
    assert "the sweep's method" in md
    assert "Delivery lag vs posting rate" not in report.render_markdown(fake_result())


def test_a_partial_run_is_merged_keeping_every_other_figure() -> None:
    previous = fake_result()
    previous["details"] = {"started_at": "full run", "post_latency": {"method": "m"}}
    del previous["celebrity"]  # an older document, before a schema addition
    run = results.empty_result()
    run["machine"] = {"cores": 2, "load_average": {"mean": 5.0}}
    run["peak_rss_mb"] = {"api": 99.0, "social-graph": None, "tweet-store": None, "fanout-worker": None}
    run["streams"] = {
        "streams": 1000,
        "rate_per_s": 5.0,
        "update_latency_ms": {"p50": 30.0, "p99": 400.0},
        "kib_per_idle_stream": 40.0,
        "idle_heartbeat_cpu_percent": 0.5,
    }
    run["details"] = {"started_at": "streams run", "streams": {"method": "s"}, "notes": []}
    doc = results.finalize(results.merge_partial(previous, run, ["streams"]))
    assert results.missing_keys(doc) == []
    assert doc["streams"] == run["streams"]
    assert doc["post_latency_ms"] == previous["post_latency_ms"]  # not measured now: kept
    assert doc["fanout_rows_per_s"]["worker"] == 8000.0
    assert doc["machine"] == previous["machine"] and doc["peak_rss_mb"] == previous["peak_rss_mb"]
    assert doc["details"]["started_at"] == "full run" and doc["details"]["post_latency"] == {"method": "m"}
    assert doc["details"]["streams"] == {"method": "s"}
    [entry] = doc["details"]["partial_runs"]
    assert entry["phases"] == ["streams"] and entry["started_at"] == "streams run"
    assert entry["machine"]["load_average"]["mean"] == 5.0
    assert doc["targets"]["stream_p99"]["pass"] is True and doc["targets"]["lag_p99"]["pass"] is False


def test_a_partial_run_merges_the_details_it_shares_with_other_phases() -> None:
    """An --only stress run records cassandra-stress under ``details.fanout``,
    where the full run's ceiling phase keeps its sweep: the merge once
    replaced the whole key and the sweep vanished from the page."""
    previous = fake_result()
    sweep = previous["details"]["fanout"]["bare_driver_tuning"]
    run = results.empty_result()
    run["details"] = {
        "started_at": "stress run",
        "notes": [],
        "fanout": {"stress_note": "cassandra-stress 4.0", "stress_rows_per_s": 15157.0},
    }
    doc = results.finalize(results.merge_partial(previous, run, ["stress"]))
    assert doc["details"]["fanout"]["bare_driver_tuning"] == sweep
    assert doc["details"]["fanout"]["stress_rows_per_s"] == 15157.0
    assert doc["details"]["fanout"]["stress_note"] == "cassandra-stress 4.0"


def test_a_partial_run_keeps_the_repeated_ratios_it_did_not_measure() -> None:
    """A ratio measured three times by an earlier run stays measured three
    times: an --only celebrity run once merged its empty ratios (n 0, no
    values) over them, and the targets read 'measured 0 times'."""
    previous = results.empty_result()
    previous["ratios"]["worker_vs_ceiling"] = {"median": 0.54, "min": 0.51, "max": 0.61, "n": 3, "values": [0.51, 0.54, 0.61]}
    run = results.empty_result()
    run["details"] = {"started_at": "celebrity run", "notes": []}
    doc = results.finalize(results.merge_partial(previous, run, ["celebrity"]))
    assert doc["ratios"]["worker_vs_ceiling"]["n"] == 3
    assert doc["ratios"]["worker_vs_ceiling"]["values"] == [0.51, 0.54, 0.61]
    assert doc["targets"]["worker_vs_driver"]["pass"] is False
