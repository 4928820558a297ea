"""The ResourceClaim of a bridge pod that asks for DRA devices (docs/architecture.md §4.6), made before
the pod is bound, in an order that never lets the pod start without it:

1. read what Slurm allocated to the job on the chosen node (``GET resources/<job>``) and the devices
   the drivers publish there (ResourceSlices); unreadable or not matching exactly: no claim, no binding;
2. create the claim, owned by the pod (it goes with the pod), or find the one an earlier pass made;
3. write its status: allocated on that node to exactly Slurm's devices, reserved for the pod;
4. write ``pod.status.extendedResourceClaimStatus``, which tells the kubelet which claim request backs
   each container's extended resource;
5. only then does the caller bind the pod.

A failure in step 3 or 4 deletes the claim again, so a claim exists only once it is complete (or for
the next pass to finish: a retry finds its own claim by name and converges). A stored claim that does
not match what Slurm allocated now (another job, another node) is deleted and made anew: an
allocation cannot change. When the pod is released (it ended, its job is over) its claim is deleted
explicitly; the owner reference covers a pod that simply disappears.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from slurm_sync.bridge import devices
from slurm_sync.bridge.devices import JSON, ClaimPlan, DeviceProblem
from slurm_sync.bridge.kube import BridgeKube
from slurm_sync.bridge.plan import Bind
from slurm_sync.bridge.view import BridgePod
from slurm_sync.kube import describe_error, is_not_found
from slurm_sync.slurm.client import SlurmClient
from slurm_sync.slurm.errors import SlurmMalformed, SlurmUnsupported

log = logging.getLogger(__name__)
Wrote = Callable[[], None]  # called once per Kubernetes write made


@dataclass(frozen=True)
class Claims:
    slurm: SlurmClient
    kube: BridgeKube

    def prepare(self, bind: Bind, wrote: Wrote) -> bool:
        """Whether the pod's claim is complete and the pod may be bound now (False: a claim that no
        longer fits was removed or is going away; the next pass goes on). Raises SlurmError when
        Slurm's allocation could not be read, ApiException for Kubernetes, DeviceProblem when the
        devices cannot be named exactly."""
        pod = bind.pod
        plan = self.plan(bind)
        wanted = devices.claim_body(plan, pod.namespace, pod.name, pod.uid)
        status = devices.claim_status(plan, pod.name, pod.uid)
        stored = self._own_claim(pod, wanted, status, wrote)
        if stored is None:
            return False
        try:
            self._complete(pod, plan, stored, status, wrote)
        except Exception:
            self._discard(pod, plan.name, str(stored["metadata"].get("uid") or ""), wrote)
            raise
        return True

    def plan(self, bind: Bind) -> ClaimPlan:
        """The claim for Slurm's allocation of the pod's job on the bind's node."""
        pod = bind.pod
        if pod.job_id is None:
            raise DeviceProblem(f"pod {pod.key} carries no Slurm job id")
        try:
            layouts = self.slurm.job_layout(pod.job_id)
        except SlurmUnsupported as exc:
            raise DeviceProblem(f"{exc}: needed for DRA device classes") from None
        layout = next((n for n in layouts if n.node == bind.slurm_node), None)
        if layout is None:
            raise SlurmMalformed(f"GET resources/{pod.job_id}: no resources on node {bind.slurm_node}, where it runs")
        slices = self.kube.list_resource_slices(bind.node)
        return devices.plan_claim(pod.name, pod.uid, pod.devices, pod.job_id, layout, bind.node, slices)

    def _own_claim(self, pod: BridgePod, wanted: JSON, status: JSON, wrote: Wrote) -> JSON | None:
        """The pod's claim as stored: created now, or the one an earlier pass made if it still fits
        (None after deleting one that does not, or while one is being deleted)."""
        name = wanted["metadata"]["name"]
        try:
            created = self.kube.create_resource_claim(pod.namespace, wanted)
        except ApiException as exc:
            if exc.status != 409:
                raise
        else:
            wrote()
            log.info("bridge: created ResourceClaim %s/%s for pod %s", pod.namespace, name, pod.key)
            return created
        stored = self.kube.read_resource_claim(pod.namespace, name)
        meta = stored.get("metadata") or {}
        if not any(ref.get("uid") == pod.uid for ref in meta.get("ownerReferences") or []):
            raise DeviceProblem(f"ResourceClaim {name} exists and does not belong to pod {pod.key}; not binding")
        if meta.get("deletionTimestamp"):
            return None
        if devices.claim_agrees(stored, wanted) and devices.allocation_state(stored, status) != "other":
            return stored
        log.info("bridge: ResourceClaim %s/%s no longer matches Slurm's allocation; made anew", pod.namespace, name)
        self.kube.delete_resource_claim(pod.namespace, name, str(meta.get("uid") or ""))
        wrote()
        return None

    def _complete(self, pod: BridgePod, plan: ClaimPlan, stored: JSON, status: JSON, wrote: Wrote) -> None:
        """Steps 3 and 4, each written only when it is not so already."""
        if devices.allocation_state(stored, status) == "missing" or not devices.reserved_as_wanted(stored, status):
            body = {"metadata": {"resourceVersion": stored["metadata"].get("resourceVersion")}, "status": status}
            self.kube.patch_resource_claim_status(pod.namespace, plan.name, body)
            wrote()
        wanted = devices.pod_claim_status(plan)
        if pod.claim_status != wanted:
            self.kube.patch_pod_claim_status(pod, devices.pod_status_body(wanted))
            wrote()

    def _discard(self, pod: BridgePod, name: str, uid: str, wrote: Wrote) -> None:
        """Delete a claim left incomplete; if that fails too, the next pass finds and finishes it."""
        try:
            self.kube.delete_resource_claim(pod.namespace, name, uid or None)
            wrote()
        except Exception as exc:  # the write that failed first is what the caller reports
            log.warning("bridge: could not delete incomplete ResourceClaim %s/%s: %s", pod.namespace, name,
                        describe_error(exc))  # fmt: skip

    def release(self, pod: BridgePod) -> None:
        """Delete the claim of a pod that ended or whose job is over (already gone is fine)."""
        try:
            self.kube.delete_resource_claim(pod.namespace, devices.claim_name(pod.name, pod.uid))
        except ApiException as exc:
            if not is_not_found(exc):
                raise
