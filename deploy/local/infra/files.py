"""Reading and rendering the launcher's text files: ``@{name}`` templates
(unknown placeholders fail loudly), JVM ``*.options`` files, and log tails
and last matching lines of engine logs."""

from __future__ import annotations

import os
import re
from pathlib import Path

from .config import LOG_TAIL_LINES
from .errors import InfraError


def _render(template: Path, values: dict[str, object]) -> str:
    """Substitute ``@{name}`` placeholders outside ``#`` comment lines.

    Unknown placeholders are an error, so a template typo fails loudly.
    """

    def sub(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise InfraError(f"{template}: no value for placeholder @{{{key}}}")
        return str(values[key])

    lines = template.read_text(encoding="utf-8").splitlines(keepends=True)
    return "".join(line if line.lstrip().startswith("#") else re.sub(r"@\{([a-z_]+)\}", sub, line) for line in lines)


def _read_jvm_options(path: Path) -> list[str]:
    """Read a Cassandra-style ``*.options`` file: one flag per line, only lines starting with '-'."""
    flags: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("-"):
            flags.append(line)
    return flags


def _tail(path: Path, lines: int = LOG_TAIL_LINES, since: int = 0, width: int = 600) -> list[str]:
    """Last ``lines`` lines of a text file, only from byte offset ``since`` on.

    Reads backwards in blocks, so it is cheap on large logs; each line is cut
    to ``width`` characters (Cassandra logs multi-kilobyte config lines).
    """
    if not path.is_file():
        return []
    with path.open("rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        start = min(max(since, 0), end)
        pos, data = end, b""
        while pos > start and data.count(b"\n") <= lines:
            step = min(65536, pos - start)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    text = data.decode("utf-8", errors="replace")
    out = text.splitlines()[-lines:]
    return [ln if len(ln) <= width else ln[:width] + " [...]" for ln in out]


def _last_match(path: Path, pattern: str) -> str | None:
    """Return group 1 of the last line of ``path`` matching ``pattern`` (reads the whole file)."""
    if not path.is_file():
        return None
    regex = re.compile(pattern)
    found: str | None = None
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            m = regex.search(line)
            if m:
                found = m.group(1)
    return found
