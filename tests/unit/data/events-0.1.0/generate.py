"""Writes events.jsonl: one message of each event type as Fanline 0.1.0's
own code builds it (its shared/events.py and the request-id header of its
shared/logs.py), for tests/unit/test_event_versions.py. Run with 0.1.0 on
the path, from the repository root:

    rm -rf /tmp/v010 && mkdir /tmp/v010 && git archive 5e0d410 shared | tar -x -C /tmp/v010
    PYTHONPATH=/tmp/v010/shared/src .venv/bin/python tests/unit/data/events-0.1.0/generate.py

Never regenerate it with a later version: it is the previous release's
output, which the current worker must still read.
"""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

from fanline_shared import events, logs

OUT = Path(__file__).with_name("events.jsonl")
assert "/v010/" in events.__file__, f"run with 0.1.0's shared/ on PYTHONPATH, not {events.__file__}"

tweet = uuid.UUID("6c4f2a1e-cb5a-11f1-8000-0242ac120002")  # a timeuuid
created = datetime(2026, 11, 26, 11, 52, 7, 123456, tzinfo=UTC)
made = [
    ("events", events.tweet_created(tweet, "Ada", created)),
    ("events", events.tweet_deleted(tweet, "Ada")),
    ("events", events.followed("Bob", "Ada")),
    ("events", events.unfollowed("Bob", "Ada")),
    ("chunks", events.fanout_chunk(tweet, "Ada", created, "carol")),
]
with OUT.open("w") as out:
    for topic, event in made:
        request_id = "req-0.1.0-fixture"
        headers = [(k, base64.b64encode(v).decode()) for k, v in logs.kafka_headers(request_id)]
        record = {"topic": topic, "key": event.key, "headers": headers, "value": event.payload.decode()}
        out.write(json.dumps(record, sort_keys=True) + "\n")
print(f"wrote {len(made)} events to {OUT}")
