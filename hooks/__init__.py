"""Metacontroller hooks: pure functions from observed state to desired state (no I/O)."""
