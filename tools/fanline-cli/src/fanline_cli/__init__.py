"""``fanline``: the operator's command line (see docs/operations.md)."""

__version__ = "0.1.0"
