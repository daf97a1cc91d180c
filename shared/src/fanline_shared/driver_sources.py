"""Load some of cassandra-driver's modules from their Python sources.

The driver's wheel ships each core module twice: compiled by Cython (``.so``)
and as the ``.py`` it was compiled from. Python's import system prefers the
``.so``. On CPython 3.11 the Cython builds of the request path are *slower*
than the interpreter running the same sources: Cython compiles plain Python
classes (no ``cdef`` types) into generic C-API calls, which skip the
interpreter's specialising, inline-caching bytecode (PEP 659). Measured with
``python -m bench.cql_cost --driver both`` (docs/benchmark-methods.md,
"cassandra-driver: compiled or sources").

``prefer_sources()`` installs a finder, ahead of the standard ones, that
loads the modules in ``SOURCE_MODULES`` from their ``.py`` files. The typed
Cython modules that decode result rows (``row_parser``, ``obj_parser``,
``deserializers`` …) stay compiled: they are faster than their Python
counterparts, and the protocol module still finds and uses them.

It must run before anything imports ``cassandra.cluster``: each storage
service's entry point (``fanline_shared.storage_service.main``) calls it
first. Later it is a no-op; ``loaded_from_sources()`` says what happened.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

# The request path: building, sending and completing a statement. Measured as
# one set against the wheel's builds (``bench.cql_cost --driver both``, and
# alternating ``mixed`` runs), not module by module.
SOURCE_MODULES = frozenset(
    f"cassandra.{name}"
    for name in ("cluster", "concurrent", "connection", "cqltypes", "metadata", "pool", "protocol", "query", "util")
)


class _SourcesFirst(importlib.abc.MetaPathFinder):
    """Finds the ``.py`` of a module in ``SOURCE_MODULES`` beside its ``.so``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in SOURCE_MODULES or not path:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path:
            source = os.path.join(entry, leaf)
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None  # no source shipped: the standard finders load the .so


_FINDER = _SourcesFirst()


def prefer_sources() -> bool:
    """Install the finder (idempotent). False when it came too late: the
    driver's core is already imported, from wherever it was."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    return "cassandra.cluster" not in sys.modules or loaded_from_sources()


def loaded_from_sources() -> bool:
    """Whether ``cassandra.cluster`` (the driver's core) runs from its source."""
    module = sys.modules.get("cassandra.cluster")
    return module is not None and str(getattr(module, "__file__", "")).endswith(".py")
