"""Durability of the topics: ``min.insync.replicas`` set on creation and
corrected on topics that already exist.

With ``acks=all`` a write is acknowledged once every in-sync replica has it,
and a partition refuses writes while fewer than ``min.insync.replicas``
replicas are in sync. Left at the broker's default (1), an acknowledged event
may live on one broker only, and losing that broker loses it. Fanline wants
one less than the replication factor (2 of 3): an acknowledged event is on
two brokers, and losing any one broker neither loses it nor stops producing.

Topics created before that setting existed, or by a tool that did not set
it (the Kubernetes Job before issue #29, an operator), keep the broker's
default forever; so every ``ensure`` (the services at start-up, ``fanline
topics ensure``) also raises a topic's setting that is below what its
replication factor calls for. It never lowers one: a stricter value is an
operator's choice. The raise goes through AlterConfigs (aiokafka has no
incremental variant), which replaces a topic's overrides, so every other
override the topic has is sent along unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

log = logging.getLogger(__name__)

MIN_INSYNC = "min.insync.replicas"
# DescribeConfigs' config_source of a topic-level override (TOPIC_CONFIG).
TOPIC_OVERRIDE = 1


def min_insync_for(replication_factor: int) -> int:
    """The ``min.insync.replicas`` a topic of this replication factor should
    have: one less than it (2 of 3), at least 1."""
    return max(1, replication_factor - 1)


@dataclass(frozen=True)
class Durability:
    """One topic's replication factor and the ``min.insync.replicas`` in effect."""

    topic: str
    replication_factor: int
    # None: not read -- a topic of one replica has nothing to protect (and the
    # embedded broker, tansu, need not answer DescribeConfigs).
    min_insync: int | None
    corrected_from: int | None = None  # set when this ensure raised it

    @property
    def wanted(self) -> int:
        return min_insync_for(self.replication_factor)

    @property
    def ok(self) -> bool:
        return self.min_insync is None or self.min_insync >= self.wanted


def _replication_factors(described: list[dict[str, Any]]) -> dict[str, int]:
    """Each topic's replication factor: its smallest partition's replica count."""
    return {t["topic"]: min((len(p["replicas"]) for p in t.get("partitions", [])), default=0) for t in described}


async def _configs(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    """Each topic's config entries (name, value, read_only, source, sensitive, ...)."""
    resources = [ConfigResource(ConfigResourceType.TOPIC, topic) for topic in topics]
    out: dict[str, list[tuple[Any, ...]]] = {}
    for response in await admin.describe_configs(resources):
        for error_code, error_message, _type, name, entries in response.resources:
            if error_code:
                raise RuntimeError(f"describing the configuration of topic {name}: error {error_code} {error_message}")
            out[name] = list(entries)
    return out


async def durability(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, Durability]:
    """Replication factor and ``min.insync.replicas`` of each existing topic."""
    factors = _replication_factors(await admin.describe_topics(topics))
    report = {topic: Durability(topic, rf, None) for topic, rf in factors.items() if rf == 1}
    replicated = [topic for topic, rf in factors.items() if rf > 1]
    for topic, entries in (await _configs(admin, replicated)).items() if replicated else ():
        value = next((e[1] for e in entries if e[0] == MIN_INSYNC), None)
        report[topic] = Durability(topic, factors[topic], int(value) if value is not None else 1)
    return report


async def correct_min_insync(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, Durability]:
    """Raise ``min.insync.replicas`` of each topic below ``min_insync_for``
    its replication factor, keeping its other overrides; return every
    topic's durability after the correction."""
    report = await durability(admin, topics)
    low = [d for d in report.values() if not d.ok]
    if not low:
        return report
    configs = await _configs(admin, [d.topic for d in low])
    resources = []
    for d in low:
        overrides = {e[0]: e[1] for e in configs[d.topic] if e[3] == TOPIC_OVERRIDE and e[0] != MIN_INSYNC}
        if any(e[4] and e[3] == TOPIC_OVERRIDE for e in configs[d.topic]):
            # A sensitive override is described without its value: resending
            # the others would drop it, so leave the topic to its operator.
            log.error(
                "topic %s: min.insync.replicas %s < %d, not corrected (it has sensitive overrides)",
                d.topic,
                d.min_insync,
                d.wanted,
            )
            continue
        resources.append(ConfigResource(ConfigResourceType.TOPIC, d.topic, configs={**overrides, MIN_INSYNC: str(d.wanted)}))
    for response in await admin.alter_configs(resources) if resources else []:
        for error_code, error_message, _type, name in response.resources:
            if error_code:
                raise RuntimeError(f"setting {MIN_INSYNC} on topic {name}: error {error_code} {error_message}")
    corrected = {r.name for r in resources}
    for d in low:
        if d.topic in corrected:
            log.warning(
                "topic %s: %s raised from %s to %d (replication factor %d)",
                d.topic,
                MIN_INSYNC,
                d.min_insync,
                d.wanted,
                d.replication_factor,
            )
            report[d.topic] = Durability(d.topic, d.replication_factor, d.wanted, corrected_from=d.min_insync)
    return report
