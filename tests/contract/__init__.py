"""Contract tests: every storage port against every adapter."""
