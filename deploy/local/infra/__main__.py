"""``python3 -m deploy.local.infra <command>`` from the repository root, or
``python3 deploy/local/infra <command>`` from anywhere: the launcher's command
line, see ``cli``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

if __package__:
    from .cli import main
else:
    # Run as a directory: Python put this directory first on the import path,
    # where cassandra.py and kafka.py would shadow top-level modules. Drop it
    # and load this directory as the package deploy.local.infra by location
    # (its modules import each other relatively), so no path is added.
    here = Path(__file__).resolve().parent
    del sys.path[0]
    spec = importlib.util.spec_from_file_location(
        "deploy.local.infra", here / "__init__.py", submodule_search_locations=[str(here)]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = package
    spec.loader.exec_module(package)
    main = importlib.import_module("deploy.local.infra.cli").main

sys.exit(main())
