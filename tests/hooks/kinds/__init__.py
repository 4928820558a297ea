"""Sync requests per kind and readers of the answers, shared by the tests that drive more than one hook."""
