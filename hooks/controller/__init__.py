"""The Controller hook (slurmctld): the Controller model every hook shares, spec and references, the pod, the hook."""

from hooks.controller.hook import customize, sync

__all__ = ["customize", "sync"]
