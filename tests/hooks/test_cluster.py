"""What every component's pods share (hooks/cluster.py): derived names. The request builders the hook tests
share are in tests/support/hooks.py."""

from __future__ import annotations

from hooks import cluster


def test_derived_names():
    assert cluster.accounting_host("acct") == "acct-accounting"
