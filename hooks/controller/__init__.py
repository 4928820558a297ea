"""The Controller hook (slurmctld): spec and references, the StatefulSet pod, the hook."""

from hooks.controller.hook import customize, sync

__all__ = ["customize", "sync"]
