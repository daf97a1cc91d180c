"""Profile: py-spy on the worker, the gateway and tweet-store while a
backlog drains and the gateway serves posts and reads. Records
``details.profile`` (or a note when py-spy is missing)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .. import profiling
from ..common import say
from ..harness import Bench


async def run(bench: Bench) -> None:
    assert bench.system is not None
    p = bench.plan
    pids = bench.system.pids()
    targets = {name: pids[name] for name in ("fanout-worker", "api", "tweet-store") if name in pids}
    if profiling.py_spy() is None:
        bench.notes.append("py-spy not installed: no profile")
        return
    say(
        f"profile: py-spy on {', '.join(targets)} for {p.profile_s}s while the worker drains a backlog and "
        "the gateway serves posts and timeline reads"
    )
    outs = {name: bench.logs / f"profile-{name}.txt" for name in targets}
    spies = {name: profiling.start_profile(pid, p.profile_s, outs[name]) for name, pid in targets.items()}
    backlog = asyncio.create_task(bench.post_backlog(max(8, p.backlog_tweets // 2)))
    stop_at = time.monotonic() + p.profile_s
    i = 0
    while time.monotonic() < stop_at:
        reader = bench.readers[i % len(bench.readers)]
        await asyncio.gather(
            bench.post_ours(bench.group_author("0"), f"profile {i}"),
            bench.http.get(
                f"{bench.api}/v1/timeline", params={"limit": 20}, headers={"authorization": f"Bearer {bench.tokens[reader]}"}
            ),
        )
        i += 1
        await asyncio.sleep(0.05)
    await backlog
    services: dict[str, Any] = {}
    for name, spy in spies.items():
        if spy is None:
            continue
        _, err = await asyncio.to_thread(spy.communicate)
        if spy.returncode not in (0, None) and not outs[name].exists():
            bench.notes.append(f"py-spy on {name} failed: {err.decode(errors='replace')[-300:]}")
            continue
        services[name] = profiling.summarize_profile(outs[name])
    findings = []
    for service, info in services.items():
        cats = info.get("categories") or []
        if cats:
            parts = ", ".join(f"{c['name']} {c['percent']:.0f} %" for c in cats[:4])
            findings.append(f"**{service}**: {parts} of {info['samples']:,} samples.")
        if info.get("httpcore_sniffio_import_percent"):
            findings.append(
                f"**{service}**: {info['httpcore_sniffio_import_percent']:.1f} % of its samples are httpcore's "
                "`current_async_library()` failing to `import sniffio` (not installed: anyio no longer depends "
                "on it), which searches every `sys.path` entry on every call, several times per HTTP request."
            )
    bench.details["profile"] = {
        "services": services,
        "findings": findings,
        "method": (
            f"`py-spy record --gil --rate 100 --function --format raw` attached for {p.profile_s} s to the worker, "
            "the gateway and tweet-store while one worker drained a backlog of 2,000-follower tweets and the "
            "harness posted and read timelines through the gateway. `--gil` samples only the thread holding the "
            "GIL, i.e. where the process spends its Python CPU (the driver's I/O thread in C and time waiting on "
            "sockets are not counted); 'area' is the package of the innermost Python frame (time in C "
            "extensions called from it is attributed there)."
        ),
    }
    # Let the worker finish the profile backlog before measuring anything else.
    say("  profile done")
