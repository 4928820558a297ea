"""Bridge settings the hooks need, read from the request (hooks are pure and get no config file).

Slinky reads them from /etc/slurm-bridge/config.yaml. Here every decorator request carries its
DecoratorController as `controller`, so the settings are annotations on the bridge
DecoratorControllers (the chart renders them from its values; unset means Slinky's Helm default):

* names.ANNOTATION_SETTING_PARTITION      -> default partition (`slurm-bridge`)
* names.ANNOTATION_SETTING_MCS_LABEL      -> job `mcs_label` (`kubernetes`; empty = not sent)
* names.ANNOTATION_SETTING_SCHEDULER_NAME -> scheduler name, also the managed-node taint value

Nothing is cached here, but Metacontroller keeps sending the DecoratorController it started with until
its spec changes: the chart puts the settings' digest in each hook's path (`?settings=`, ignored here), so
a changed setting restarts the controller. Annotations edited by hand need a spec change too (or a
Metacontroller restart). The admission webhook gets no `controller`; its settings travel in the webhook URL
(see admission.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from slinky_common import names
from slinky_common.jsontypes import JSON

DEFAULT_PARTITION = "slurm-bridge"
DEFAULT_MCS_LABEL = "kubernetes"


@dataclass(frozen=True)
class BridgeSettings:
    partition: str = DEFAULT_PARTITION
    mcs_label: str = DEFAULT_MCS_LABEL
    scheduler_name: str = names.BRIDGE_SCHEDULER_NAME


def from_controller(controller: JSON) -> BridgeSettings:
    """Settings from the DecoratorController's annotations, Slinky's defaults for absent ones."""
    annotations = (controller.get("metadata") or {}).get("annotations") or {}
    return BridgeSettings(
        partition=annotations.get(names.ANNOTATION_SETTING_PARTITION) or DEFAULT_PARTITION,
        mcs_label=annotations.get(names.ANNOTATION_SETTING_MCS_LABEL, DEFAULT_MCS_LABEL),
        scheduler_name=annotations.get(names.ANNOTATION_SETTING_SCHEDULER_NAME) or names.BRIDGE_SCHEDULER_NAME,
    )
