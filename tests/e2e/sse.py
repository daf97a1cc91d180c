"""A small server-sent events reader for the end-to-end tests.

It reads a stream in a background thread the way a browser's EventSource
would (``event:``/``id:``/``data:`` fields, blank line ends an event, ``:``
starts a comment) and records what arrived and when, so tests can assert on
order, duplicates and latency.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Event:
    event: str
    data: str
    id: str | None
    at: float  # time.time() when the blank line ending it arrived

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class Listener:
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    comments: list[float] = field(default_factory=list)
    status: int | None = None
    response_headers: httpx.Headers | None = None
    body: str = ""
    ended: bool = False

    def __post_init__(self) -> None:
        self._opened = threading.Event()
        self._client = httpx.Client(timeout=httpx.Timeout(30, read=120), cookies=self.cookies)
        self._response: httpx.Response | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        if not self._opened.wait(30):
            raise AssertionError(f"no response from {self.url} in 30 s")

    def _read(self) -> None:
        try:
            with self._client.stream("GET", self.url, headers=self.headers) as response:
                self._response = response
                self.status = response.status_code
                self.response_headers = response.headers
                if response.status_code != 200:
                    self.body = response.read().decode()
                    self._opened.set()
                    return
                self._opened.set()
                fields: dict[str, str] = {}
                data: list[str] = []
                for line in response.iter_lines():
                    if line == "":
                        if data or fields:
                            self.events.append(
                                Event(fields.get("event", "message"), "\n".join(data), fields.get("id"), time.time())
                            )
                        fields, data = {}, []
                    elif line.startswith(":"):
                        self.comments.append(time.time())
                    else:
                        name, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if name == "data":
                            data.append(value)
                        else:
                            fields[name] = value
        except (httpx.HTTPError, RuntimeError, ValueError):
            pass
        finally:
            self.ended = True
            self._opened.set()

    def updates(self) -> list[str]:
        return [e.id or "" for e in self.events if e.event == "update"]

    def deletes(self) -> list[str]:
        return [e.json()["id"] for e in self.events if e.event == "delete"]

    def wait(self, event: str, tweet_id: str, timeout: float = 10.0) -> Event:
        """The first ``event`` about ``tweet_id`` (waits for it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in list(self.events):
                if e.event == event and (e.id == tweet_id or (event == "delete" and e.json()["id"] == tweet_id)):
                    return e
            time.sleep(0.02)
        raise AssertionError(f"no {event} for {tweet_id} on {self.url} after {timeout}s; got {self.events}")

    def close(self) -> None:
        if self._response is not None:
            self._response.close()
        self._client.close()
        self._thread.join(5)
