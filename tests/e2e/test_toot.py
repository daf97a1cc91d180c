"""The ``toot`` CLI (a Mastodon client we did not write; GPL-3.0, a test-only
tool) against the whole system: ``login_cli``, ``whoami``, ``post``,
``timelines``, ``follow``, ``delete``, ``unfollow`` — each run as its own
process, its configuration under a temporary ``XDG_CONFIG_HOME``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .client import PASSWORD, Api, eventually
from .masto import unique

pytestmark = pytest.mark.e2e


class Toot:
    """One toot user: ``toot <args>`` with its own configuration directory."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def __call__(self, *args: str, check: bool = True) -> str:
        env = {**os.environ, "XDG_CONFIG_HOME": str(self.home), "NO_COLOR": "1", "COLUMNS": "200"}
        done = subprocess.run(
            [sys.executable, "-m", "toot", "--no-color", *args], env=env, capture_output=True, text=True, timeout=60
        )
        if check:
            assert done.returncode == 0, f"toot {' '.join(args)}: {done.stdout}\n{done.stderr}"
        return done.stdout + done.stderr

    def timeline(self, which: str = "home") -> list[dict[str, Any]]:
        out = self("timelines", which, "--json", "--no-pager", "--no-clear", "--limit", "40")
        return list(json.loads(out))


def test_toot_logs_in_posts_follows_reads_and_deletes(masto_system: Any, tmp_path: Path) -> None:
    url = masto_system.url()
    plain = Api(url)
    try:
        reader_name, author_name = plain.sign_up(unique("t")), plain.sign_up(unique("t"))
    finally:
        plain.close()
    reader, author = Toot(tmp_path / "reader"), Toot(tmp_path / "author")
    assert "Successfully logged in" in reader("login_cli", "-i", url, "-e", reader_name, "-p", PASSWORD)
    assert "Successfully logged in" in author("login_cli", "-i", url, "-e", author_name, "-p", PASSWORD)
    assert f"@{reader_name}" in reader("whoami")

    posted = author("post", "hello from toot <3")
    match = re.search(rf"/@{author_name}/(\d+)", posted)
    assert match, posted
    status_id = match.group(1)
    assert any(s["id"] == status_id for s in author.timeline("public"))

    assert f"now following {author_name}" in reader("follow", author_name)
    eventually(lambda: any(s["id"] == status_id for s in reader.timeline()), timeout=30, what="the follow's merge")
    shown = next(s for s in reader.timeline() if s["id"] == status_id)
    assert shown["content"] == "<p>hello from toot &lt;3</p>" and shown["account"]["acct"] == author_name
    # As people read it (toot parses every status into its own entity classes).
    printed = reader("timelines", "home", "--no-pager", "--no-clear", "--limit", "40")
    assert "hello from toot <3" in printed and author_name in printed

    assert "Status deleted" in author("delete", status_id)
    eventually(lambda: all(s["id"] != status_id for s in reader.timeline()), timeout=30, what="the delete")
    assert f"no longer following {author_name}" in reader("unfollow", author_name)
    assert f"@{author_name}" in reader("whois", author_name)
