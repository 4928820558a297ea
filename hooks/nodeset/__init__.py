"""The NodeSet hook (slurmd workers): spec, observed pods, the plan, pods, reservations, deletion."""

from hooks.nodeset.hook import CHILD_READERS, customize, finalize, sync

__all__ = ["CHILD_READERS", "customize", "finalize", "sync"]
