"""The benchmark's phases, one module each, each with one entry point
``run(bench)`` (``ceiling`` also has ``run_again``: the same measurement after
the scaling runs). A phase reads the shared ``harness.Bench`` (system, session,
accounts, plan) and records its figures in ``bench.doc`` (the results JSON)
and ``bench.details``; ``bench.run`` calls them in order."""
