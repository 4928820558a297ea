"""The NodeSet hook (slurmd workers): spec, observed pods, the plan, pods, reservations, deletion."""

from hooks.nodeset.hook import customize, finalize, sync

__all__ = ["customize", "finalize", "sync"]
