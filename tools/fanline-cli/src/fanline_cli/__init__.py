"""``fanline``: the operator's command line (see docs/operations/cli.md)."""

__version__ = "0.2.0"
