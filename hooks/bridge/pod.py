"""The bridge pod decorator: publish each pending pod's placeholder job for slurm_sync.

Contract with slurm_sync (all on the pod; `names.*` spell the keys):

* ANNOTATION_PLACEHOLDER_JOB: the job body (compact JSON, sorted keys) to submit as `{"job": …}`.
  Every live pod of a group publishes the same body and ANNOTATION_PLACEHOLDER_GROUP (the group's
  identity), so slurm_sync submits one job per group value and labels every member with
  LABEL_SLURM_JOB_ID. While the job is PENDING, slurm_sync updates it when the body changes.
  A pending job that no live labelled pod publishes any more (gang fell short, annotations broke)
  is cancelled. Pods bound to a node, finished or being deleted are left as they are: once Slurm
  allocated the job, its shape is fixed.
* ANNOTATION_JOB_ERROR: why no job is published (a malformed `slurmjob.slinky.slurm.net/*`
  annotation, a missing owner, a gang still short of pods). Exactly one of the job and the error
  is set; fixing the cause removes the error.
* What slurm_sync does with the body (slurm_sync/bridge/plan.py): it groups unbound live pods by
  ANNOTATION_PLACEHOLDER_GROUP and submits only when every member publishes one body naming exactly
  the members; a group holding a PENDING job whose body changed gets that job updated in place;
  a PENDING job none of whose live pods publishes a body any more is *cancelled*. So withdrawing or
  changing the body is an order to Slurm, never a way to say "I could not compute it".
* Missing input keeps what is published. When an object the pod points at (its Job, JobSet, LWS,
  PodGroup, Workload, other controller) is absent from the request — deleted, or only Metacontroller's
  related-object cache lagging — the input is missing, not wrong: a pod that already publishes a body
  or carries LABEL_SLURM_JOB_ID gets no change to any of the three keys (they are left out of the
  answer, which Metacontroller leaves untouched). A pod with nothing published reports the missing
  object in ANNOTATION_JOB_ERROR. Only a real change of the group — members gone (ended, deleted,
  the gang short), an annotation now invalid, other labels or owners — changes or withdraws the body.
  A pod whose coscheduling PodGroup vanishes after it published that group's body counts as missing
  input too, rather than falling through to a one-pod job.
* This hook only ever sets or nulls the three keys above; slurm_sync's own keys
  (LABEL_SLURM_JOB_ID, ANNOTATION_JOB_RELEASED, ANNOTATION_SLURM_NODE, ANNOTATION_PLACEHOLDER_APPLIED,
  ANNOTATION_SUBMIT_ERROR) are never in its answers.
* Finalize (deletion, or the pod leaving the bridge): the job and error annotations go away and
  the pod is held until it has no LABEL_SLURM_JOB_ID or slurm_sync sets ANNOTATION_JOB_RELEASED to
  that job id: slurm_sync does so once this pod no longer needs the job, i.e. it has cancelled
  the job (or seen it end) or other live pods of the group still run in it.
"""

from __future__ import annotations

from hooks.bridge import annotations as job_annotations
from hooks.bridge import job, settings, workload
from hooks.contract import CustomizeRequest, DecoratorRequest
from slinky_common import names, quantity, resources
from slinky_common.jsontypes import JSON


def sync(req: DecoratorRequest) -> JSON:
    pod = req.object
    if _settled(pod):
        return {"annotations": {}}
    return {"annotations": publish(req)}


def customize(req: CustomizeRequest) -> JSON:
    return {"relatedResources": workload.related_rules(req.parent)}


def finalize(req: DecoratorRequest) -> JSON:
    meta = req.object["metadata"]
    job_id = (meta.get("labels") or {}).get(names.LABEL_SLURM_JOB_ID, "")
    released = (meta.get("annotations") or {}).get(names.ANNOTATION_JOB_RELEASED)
    return {"annotations": _withdrawn(), "finalized": not job_id or released == job_id}


def publish(req: DecoratorRequest) -> dict[str, str | None]:
    """The pod's job annotations: the placeholder job and its group, or the reason there is none."""
    try:
        group = workload.resolve(req)
        parsed = job_annotations.parse(group.annotations, group.source)
        pods = resources.of_group(group.members, group.base_cpus, group.base_memory_mib)
    except workload.RelatedMissing as err:
        return {} if _holds_a_job(req.object) else _withdrawn() | {names.ANNOTATION_JOB_ERROR: str(err)}
    except (workload.GroupNotReady, job_annotations.BadAnnotations) as err:
        return _withdrawn() | {names.ANNOTATION_JOB_ERROR: str(err)}
    except quantity.BadQuantity as err:  # not a quantity, or more than Slurm holds (admission refuses both)
        return _withdrawn() | {names.ANNOTATION_JOB_ERROR: f"resources Slurm cannot take: {err}"}
    body = job.description(group, pods, parsed, settings.from_controller(req.controller))
    return {
        names.ANNOTATION_PLACEHOLDER_JOB: job.encode(body),
        names.ANNOTATION_PLACEHOLDER_GROUP: group.key,
        names.ANNOTATION_JOB_ERROR: None,
    }


def _settled(pod: JSON) -> bool:
    """Bound, finished or deleting pods keep what they have: their job is decided or over."""
    return bool((pod.get("spec") or {}).get("nodeName")) or not workload.is_live(pod)


def _holds_a_job(pod: JSON) -> bool:
    """The pod publishes a body or slurm_sync recorded a job for it: withdrawing would cancel that job."""
    meta = pod.get("metadata") or {}
    return bool(
        (meta.get("annotations") or {}).get(names.ANNOTATION_PLACEHOLDER_JOB)
        or (meta.get("labels") or {}).get(names.LABEL_SLURM_JOB_ID)
    )


def _withdrawn() -> dict[str, str | None]:
    return {
        names.ANNOTATION_PLACEHOLDER_JOB: None,
        names.ANNOTATION_PLACEHOLDER_GROUP: None,
        names.ANNOTATION_JOB_ERROR: None,
    }
