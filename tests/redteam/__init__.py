"""Red-team tests: hostile folders and files of every kind docs/security.md names (issue 33)."""
