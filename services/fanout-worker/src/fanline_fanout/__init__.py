"""fanout-worker: consumes Fanline events and maintains home timelines."""

__version__ = "0.1.0"
