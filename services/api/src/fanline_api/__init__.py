"""api: the public HTTP gateway of Fanline."""

__version__ = "0.2.0"
