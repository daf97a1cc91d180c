"""Fanline's benchmark harness: ``python -m bench.run`` (``make bench``, ``make bench-quick``).
The scenarios are data (``scenarios.toml``), the targets too (``targets.toml``); every
measurement is a row of ``results/latest.json``; docs/benchmarks.md is rendered from them."""
