"""tweet-store: tweets, userlines, the public timeline and home timelines."""

__version__ = "0.2.0"
