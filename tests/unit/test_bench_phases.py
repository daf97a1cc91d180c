"""Pieces of the issue-13 benchmark phases that need no engines: the latency
proxy (against a local echo server), the push-vs-merge crossover and the
CPU-per-row arithmetic."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.latency_proxy import LatencyProxy  # noqa: E402
from bench.phases.celebrity import compute_crossover  # noqa: E402
from bench.phases.latency_scaling import cpu_per_1k, steady_rate  # noqa: E402


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


async def _round_trips(port: int, payloads: list[bytes]) -> tuple[list[float], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    times, got = [], b""
    for payload in payloads:
        started = time.perf_counter()
        writer.write(payload)
        await writer.drain()
        chunk = await reader.readexactly(len(payload))
        times.append(time.perf_counter() - started)
        got += chunk
    writer.close()
    return times, got


def test_proxy_adds_its_delay_each_way_and_keeps_the_bytes_in_order() -> None:
    async def scenario() -> None:
        echo = await asyncio.start_server(_echo, "127.0.0.1", 0)
        echo_port = echo.sockets[0].getsockname()[1]
        proxy = LatencyProxy("127.0.0.1", echo_port, 0.02)
        front = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
        front_port = front.sockets[0].getsockname()[1]
        payloads = [bytes([i]) * (1000 * (i + 1)) for i in range(5)]
        direct, _ = await _round_trips(echo_port, payloads)
        proxied, got = await _round_trips(front_port, payloads)
        assert got == b"".join(payloads)
        assert min(proxied) >= 0.04  # 20 ms each way
        assert min(proxied) > max(direct)
        front.close()
        echo.close()

    asyncio.run(scenario())


def test_proxy_delays_without_limiting_throughput() -> None:
    """Many writes in flight arrive one delay later, not one delay each."""

    async def scenario() -> None:
        echo = await asyncio.start_server(_echo, "127.0.0.1", 0)
        proxy = LatencyProxy("127.0.0.1", echo.sockets[0].getsockname()[1], 0.05)
        front = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", front.sockets[0].getsockname()[1])
        started = time.perf_counter()
        for _ in range(20):
            writer.write(b"x" * 100)
            await asyncio.sleep(0.005)
        await writer.drain()
        await reader.readexactly(2000)
        took = time.perf_counter() - started
        assert 0.1 + 0.09 <= took < 0.1 + 0.6  # 2 x 50 ms + the 0.1 s of sends, not 20 x 100 ms
        writer.close()
        front.close()
        echo.close()

    asyncio.run(scenario())


def _run(followers: int, first: float, p50: float | None = None) -> dict[str, object]:
    return {"followers": followers, "readable_by_last_follower_s": {"min": first, "p50": p50 or first}}


def test_crossover_is_where_one_pushed_tweet_takes_the_budget() -> None:
    runs = {
        "off": {"1000": _run(1000, 0.2), "10000": _run(10_000, 1.1), "100000": _run(100_000, 10.0)},
        "on": {"1000": _run(1000, 0.2), "10000": _run(10_000, 0.3), "100000": _run(100_000, 0.5)},
    }
    reads = {"by_large_accounts": {"0": {"p50": 10.0}, "10": {"p50": 12.0}}}
    out = compute_crossover(runs, 10_000, reads)
    # 0.2 s at 1,000 and 1.1 s at 10,000: 1 s at 1,000 + 9,000 x 0.8 / 0.9 = 9,000 followers
    assert out["followers"] == 9000
    assert out["threshold_over_crossover"] == pytest.approx(1.111, abs=1e-3)
    assert out["merged_readable_s"] == 0.4  # p50 of the counts at or above the threshold
    assert out["read_ms_per_large_account"] == 0.2
    assert "9,000 followers" in out["text"]


def test_crossover_below_and_above_the_measured_counts() -> None:
    below = {"off": {"1000": _run(1000, 2.0), "10000": _run(10_000, 8.0)}}
    assert compute_crossover(below, 10_000)["followers"] == 500  # through the origin
    above = {"off": {"1000": _run(1000, 0.1), "10000": _run(10_000, 0.4)}}
    assert compute_crossover(above, 10_000)["followers"] == 28_000  # 10,000 + 9,000 x 0.6 / 0.3
    assert compute_crossover({"off": {}}, 10_000)["followers"] is None
    flat = {"off": {"1000": _run(1000, 0.1), "10000": _run(10_000, 0.1)}}
    assert compute_crossover(flat, 10_000)["followers"] is None


def test_cpu_per_1k_rows_counts_new_processes_from_zero() -> None:
    before = {"fanout-worker": {1: 10.0}, "tweet-store": {2: 5.0}, "cassandra": {}}
    after = {"fanout-worker": {1: 12.0, 3: 1.0}, "tweet-store": {2: 9.0}, "cassandra": {}}
    assert cpu_per_1k(before, after, 2000) == {"fanout-worker": 1.5, "tweet-store": 2.0, "cassandra": None}
    assert cpu_per_1k(before, after, 0)["fanout-worker"] is None


def test_the_celebrity_plan_can_be_narrowed_from_the_command_line() -> None:
    from bench.run import parse_args

    args = parse_args(["--only", "celebrity", "--celebrity-counts", "1000,1000000", "--celebrity-posts", "2"])
    assert (args.celebrity_counts, args.celebrity_posts) == ((1000, 1_000_000), 2)
    for bad in ("1000,x", "3", ""):
        with pytest.raises(SystemExit):
            parse_args(["--celebrity-counts", bad])


def test_the_latency_scaling_delay_can_be_set_from_the_command_line() -> None:
    from bench.run import parse_args

    assert parse_args(["--scale-delay-ms", "80"]).scale_delay_ms == 80.0
    assert parse_args([]).scale_delay_ms is None  # the plan's own delay
    assert parse_args(["--backlog-authors", "64"]).backlog_authors == 64


def test_steady_rate_starts_once_every_worker_has_joined() -> None:
    # 1,000 rows: 100 rows/s while the group forms (to t=4), then 400 rows/s.
    series = [(t / 2, float(min(1000, 50 * t if t <= 8 else 400 + 200 * (t - 8)))) for t in range(0, 13)]
    rate, window = steady_rate(series, 1000, all_ready=4.0)
    assert rate == pytest.approx(400)
    assert window == {"from_share": 0.4, "to_share": 0.9, "seconds": 1.25}
    # Taken from 10 % instead, the joins would pull it down.
    rate_10, _ = steady_rate(series, 1000, all_ready=0.0)
    assert rate_10 is not None and rate_10 < 300


def test_steady_rate_refuses_a_window_too_small_to_measure() -> None:
    # The last worker joined when 85 % was already written: no figure.
    series = [(0.0, 0.0), (1.0, 850.0), (2.0, 1000.0)]
    assert steady_rate(series, 1000, all_ready=1.0) == (None, None)
    assert steady_rate([(0.0, 0.0)], 1000, all_ready=0.0) == (None, None)


def test_post_phase_lag_sample_tells_trimmed_rows_from_missing_ones() -> None:
    """A sampled tweet an owner's timeline was trimmed past (its horizon is
    newer) is not "missing": it is counted apart and has no lag; a row an
    owner should still hold and does not is missing."""
    import uuid
    from types import SimpleNamespace

    from bench.phases.post_latency import own_lags

    def timeuuid(seconds: float) -> uuid.UUID:
        ts = 0x01B21DD213814000 + int(seconds * 10_000_000)  # 100 ns since 1582, as version 1 UUIDs count
        return uuid.UUID(fields=(ts & 0xFFFFFFFF, (ts >> 32) & 0xFFFF, ((ts >> 48) & 0x0FFF) | 0x1000, 0x80, 0, 1))

    t_old, t_new, t_lost, t_last = timeuuid(1), timeuuid(2), timeuuid(3), timeuuid(5)
    stored = {  # owner -> tweet -> writetime (µs)
        "author": {t_old: 1, t_new: 2_000_000, t_lost: 3, t_last: 5_000_000},
        "f1": {t_new: 2_500_000, t_last: 5_500_000},  # trimmed below 1.5 s; never got t_lost
        "f2": {t_old: 1, t_new: 2_100_000, t_lost: 3, t_last: 5_100_000},
    }

    async def home_rows(tid: uuid.UUID, owners: list[str]) -> dict[str, int]:
        return {o: stored[o][tid] for o in owners if tid in stored[o]}

    async def home_horizons(owners: list[str]) -> dict[str, uuid.UUID]:
        return {"f1": timeuuid(1.5)}

    bench = SimpleNamespace(
        graph=SimpleNamespace(followers_of=lambda a: ["f1", "f2"]), home_rows=home_rows, home_horizons=home_horizons, notes=[]
    )
    sample = [("Author", str(t), when) for t, when in ((t_old, 0.0), (t_new, 1.0), (t_lost, 2.0), (t_last, 4.0))]
    lags = asyncio.run(own_lags(bench, {"2": sample}))
    assert lags == {"2": [pytest.approx(1500.0), pytest.approx(1500.0)]}  # t_new: 2.5 s - 1.0 s; t_last: 5.5 - 4.0
    assert bench.notes == [
        "post latency: 1 sampled tweets were no longer stored by every owner (trimmed to FANLINE_HOME_MAX_ROWS by "
        "newer tweets); their lag is not counted",
        "post latency: 1 sampled tweets were missing home rows after the drain",
    ]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_bench_run_stopped_by_a_signal_still_tears_down(tmp_path: Path, sig: str) -> None:
    """Even started with SIGINT ignored (a shell's background job), SIGTERM
    or SIGINT cancels the running phase and the teardown in ``finally`` runs."""
    import signal
    import subprocess

    done = tmp_path / "torn-down"
    code = (
        "import asyncio, pathlib, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from bench.run import stop_on_signals\n"
        "stop_on_signals()\n"
        "async def phase():\n"
        "    try:\n"
        "        print('ready', flush=True)\n"
        "        await asyncio.sleep(60)\n"
        "    finally:\n"
        "        await asyncio.sleep(0.05)\n"
        f"        pathlib.Path({str(done)!r}).write_text('ok')\n"
        "try:\n"
        "    asyncio.run(phase())\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(getattr(signal, sig))
    assert proc.wait(10) == 130
    assert done.read_text() == "ok"
