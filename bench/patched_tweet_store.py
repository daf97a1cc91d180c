"""Experiment hook (harness only, never the product): run tweet-store with a
different home-timeline write window than ``policies.DEFAULT_FANOUT_CONCURRENCY``.

``python -m bench.run --tweet-store-window N`` starts tweet-store through this
module so a proposed setting can be measured before anyone changes product
code. The window is read from ``BENCH_HOME_WINDOW``.
"""

from __future__ import annotations

import os
import runpy

from fanline_shared import policies

policies.DEFAULT_FANOUT_CONCURRENCY = int(os.environ["BENCH_HOME_WINDOW"])
runpy.run_module("fanline_tweet_store", run_name="__main__", alter_sys=True)
