"""The open-loop part of the results document (issue 18 items 3-5): its
keys, their empty values and its targets. ``results`` merges them into
``SCHEMA``, ``empty_result`` and ``evaluate_targets``; kept apart so that
module stays readable. Targets are returned as plain tuples (``results``
wraps them) to avoid an import cycle."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SECTIONS = ("mixed_load", "saturation", "overload", "mixed_embedded")

SCHEMA: tuple[str, ...] = (
    *(
        f"{s}.{k}"
        for s in ("mixed_load", "mixed_embedded")
        for k in ("rate_per_s", "achieved_rate_per_s", "client", "delivery_lag_ms", "cpu_s_per_1k_requests", "generator")
    ),
    "saturation.capacity_per_s",
    "saturation.capacity_accepted_p99_ms",
    "saturation.steps",
    "overload.rate_per_s",
    "overload.capacity_accepted_p99_ms",
    "overload.accepted_p99_ms",
    "overload.refused",
    "overload.refused_max_ms",
    "overload.errors",
)


def empty() -> dict[str, Any]:
    step: dict[str, Any] = {
        "rate_per_s": None,
        "achieved_rate_per_s": None,
        "client": None,
        "delivery_lag_ms": None,
        "cpu_s_per_1k_requests": None,
        "generator": None,
    }
    return {
        "mixed_load": dict(step),
        "saturation": {"capacity_per_s": None, "capacity_accepted_p99_ms": None, "steps": []},
        "overload": {
            "rate_per_s": None,
            "capacity_accepted_p99_ms": None,
            "accepted_p99_ms": None,
            "refused": None,
            "refused_max_ms": None,
            "errors": None,
        },
        "mixed_embedded": dict(step),
    }


def _num(doc: Mapping[str, Any], *path: str) -> float | None:
    node: Any = doc
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


Spec = tuple[str, str, float | None, float | None, str, str, str]


def target_specs(doc: Mapping[str, Any]) -> list[Spec]:
    """(key, text, measured, bound, op, measured label, bound label) of each target."""
    cap99 = _num(doc, "overload", "capacity_accepted_p99_ms")
    return [
        (
            "overload_accepted_p99",
            "at 2 x the saturation rate, p99 of accepted requests <= 2 x its p99 at capacity",
            _num(doc, "overload", "accepted_p99_ms"),
            None if cap99 is None else 2 * cap99,
            "<=",
            "accepted p99 at 2 x capacity (ms)",
            "2 x accepted p99 at capacity (ms)",
        ),
        (
            "overload_refusals_fast",
            "at 2 x the saturation rate, every refused request answered within 100 ms",
            _num(doc, "overload", "refused_max_ms"),
            100.0,
            "<=",
            "slowest 503 (ms)",
            "100 ms",
        ),
        (
            "overload_no_errors",
            "at 2 x the saturation rate, nothing fails but fast 503s with Retry-After",
            _num(doc, "overload", "errors"),
            0.0,
            "<=",
            "requests failed otherwise",
            "0",
        ),
        (
            "mixed_lag_p99",
            "delivery lag p99 <= 2 s under the steady mixed load",
            _num(doc, "mixed_load", "delivery_lag_ms", "p99"),
            2000.0,
            "<=",
            "lag p99 (ms)",
            "2,000 ms",
        ),
    ]
