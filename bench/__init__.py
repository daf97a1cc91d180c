"""Fanline benchmarks (issue 4): ``python -m bench.run`` / ``make bench``.

Measures, in one run against the real Cassandra and Kafka started by
``deploy/local/infra``: post latency vs follower count (ours and a
Twissandra-style synchronous baseline), fan-out throughput (worker, bare
driver, cassandra-stress), 1/2/4-worker scaling, delivery lag, the home
timeline read path vs its raw CQL, and the peak RSS of every service.

Modules: ``stats`` (percentiles), ``results`` (the JSON schema, targets and
writer), ``report`` (docs/benchmarks.md: stitches the sections of
``report_write_path``, ``report_read_path``, ``report_analysis`` and the issue
modules below; ``report_plots`` draws the plots), ``seed`` (users and
follower edges), ``baseline`` (the synchronous fan-out endpoint), ``driver``
(bare-driver measurements), ``procs`` (service processes), ``rss`` (peak RSS),
``prometheus`` (metric scraping), ``profiling`` (py-spy), ``stress``
(cassandra-stress), ``common`` (the plan, constants, progress), ``harness``
(``Bench``: the system, session, accounts and helpers every phase uses),
``phases`` (one module per phase: ``ceiling``, ``cassandra_stress``,
``scaling``, ``post_latency``, ``delivery_lag``, ``read_path``, ``profile``),
``results_fair`` and ``report_fair`` (issue 18: the fair baselines, repeated
ratios and their targets and page section), ``run`` (the orchestrator and the
CLI).
"""
