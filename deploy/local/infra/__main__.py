"""``python3 deploy/local/infra <command>`` (or ``python3 -m infra`` with
deploy/local on the path): the launcher's command line, see ``cli``."""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    # Run as a directory: sys.path[0] is this package's own directory, where
    # ``cassandra``/``kafka`` would shadow top-level modules. Put deploy/local
    # there instead, as when this was the single file deploy/local/infra.py.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from infra.cli import main

sys.exit(main())
