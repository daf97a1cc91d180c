"""social-graph: users, credentials, sessions and the follow graph."""

__version__ = "0.2.0"
