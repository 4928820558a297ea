"""Every test of the NodeSet hook runs on its pinned clock (tests/hooks/nodeset/fixtures.py)."""

from tests.hooks.nodeset.fixtures import client, clock  # noqa: F401  (fixtures)
