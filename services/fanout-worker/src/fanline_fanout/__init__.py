"""fanout-worker: consumes Fanline events and maintains home timelines."""

__version__ = "0.2.0"
