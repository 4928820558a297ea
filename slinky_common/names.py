"""The shared vocabulary: every label, annotation, condition, finalizer and taint name, once.

Hooks and slurm_sync both import from here; no other module spells these keys. Names that
Slinky defines keep Slinky's spelling so that existing tooling and habits carry over.
"""

from typing import Final

GROUP: Final = "slinky.slurm.net"
VERSION: Final = "v1beta1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

SLINKY_PREFIX: Final = "slinky.slurm.net/"
NODESET_PREFIX: Final = "nodeset.slinky.slurm.net/"
SCHEDULER_PREFIX: Final = "scheduler.slinky.slurm.net/"
SLURMJOB_PREFIX: Final = "slurmjob.slinky.slurm.net/"
TOPOLOGY_PREFIX: Final = "topology.slinky.slurm.net/"

# Well-known Kubernetes labels on every child (selector labels are NAME and INSTANCE only).
LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_CLUSTER: Final = SLINKY_PREFIX + "cluster"
ANNOTATION_DEFAULT_CONTAINER: Final = "kubectl.kubernetes.io/default-container"

# Hash annotations that roll pods when referenced data changes.
ANNOTATION_SLURM_KEY_HASH: Final = SLINKY_PREFIX + "slurm-key-hash"
ANNOTATION_JWT_KEY_HASH: Final = SLINKY_PREFIX + "jwt-key-hash"
ANNOTATION_SLURM_CONFIG_HASH: Final = SLINKY_PREFIX + "slurm-config-hash"
ANNOTATION_SLURMDBD_CONF_HASH: Final = SLINKY_PREFIX + "slurmdbd-conf-hash"
ANNOTATION_SSHD_CONF_HASH: Final = SLINKY_PREFIX + "sshd-conf-hash"
ANNOTATION_SSSD_CONF_HASH: Final = SLINKY_PREFIX + "sssd-conf-hash"
ANNOTATION_SSH_HOST_KEYS_HASH: Final = SLINKY_PREFIX + "ssh-host-keys-hash"

# NodeSet pods: identity, revision, and the drain-before-delete protocol (docs/architecture.md §4).
LABEL_NODESET_POD_NAME: Final = NODESET_PREFIX + "pod-name"
LABEL_NODESET_POD_INDEX: Final = NODESET_PREFIX + "pod-index"
LABEL_NODESET_POD_HOSTNAME: Final = NODESET_PREFIX + "pod-hostname"
LABEL_NODESET_REVISION: Final = "controller-revision-hash"
LABEL_POD_PROTECT: Final = NODESET_PREFIX + "pod-protect"
ANNOTATION_POD_CORDON: Final = NODESET_PREFIX + "pod-cordon"
# Slinky 1.3.0: a health checker's (or other automation's) ask for a drain, beside an administrator's pod-cordon.
ANNOTATION_POD_CORDON_REQUESTED: Final = NODESET_PREFIX + "pod-cordon-requested"
ANNOTATION_POD_DELETION_COST: Final = NODESET_PREFIX + "pod-deletion-cost"
ANNOTATION_POD_DEADLINE: Final = NODESET_PREFIX + "pod-deadline"
ANNOTATION_NODE_CORDON_REASON: Final = NODESET_PREFIX + "node-cordon-reason"
# slurm_sync's word that Slurm runs no job on the pod's node and will start none (slinky_common/slurmstate.is_released).
ANNOTATION_DRAINED: Final = NODESET_PREFIX + "drained"
ANNOTATION_SLURM_NODE_ABSENT: Final = NODESET_PREFIX + "slurm-node-absent"
ANNOTATION_HOSTNAME_OVERRIDE: Final = NODESET_PREFIX + "hostname-override"
# Hash of what slurmd registers its dynamic node with (its args, env and resources): a pod replaced by one
# with another hash needs its Slurm node record deleted first (docs/architecture.md §4.1).
ANNOTATION_REGISTRATION_HASH: Final = NODESET_PREFIX + "registration-hash"
ANNOTATION_SLURM_OBSERVED: Final = SLINKY_PREFIX + "slurm-observed"

# Controller pods: the one slurmctld that answers ping (HA).
LABEL_ACTIVE_CONTROLLER: Final = "controller.slinky.slurm.net/active"

# Pod condition types that mirror Slurm node states; prefix + Slurm state in CamelCase.
CONDITION_SLURM_NODE_STATE_PREFIX: Final = "SlurmNodeState"
DRAIN_REASON_PREFIX: Final = "slurm-operator:"

# The bridge (slurm-bridge's names where it has one).
BRIDGE_SCHEDULER_NAME: Final = "slurm-bridge-scheduler"
LABEL_BRIDGE_MANAGED: Final = SCHEDULER_PREFIX + "managed"
LABEL_SLURM_JOB_ID: Final = SCHEDULER_PREFIX + "slurm-jobid"
ANNOTATION_SLURM_NODE: Final = SLINKY_PREFIX + "slurm-node"
ANNOTATION_PLACEHOLDER_JOB: Final = SCHEDULER_PREFIX + "placeholder-job"
ANNOTATION_JOB_ERROR: Final = SCHEDULER_PREFIX + "job-error"
FINALIZER_SCHEDULER: Final = SCHEDULER_PREFIX + "finalizer"
LABEL_SLURM_NODE_NAME: Final = SLINKY_PREFIX + "slurm-nodename"
LABEL_EXTERNAL_NODE: Final = SCHEDULER_PREFIX + "external-node"
LABEL_BRIDGE_WORKER: Final = SCHEDULER_PREFIX + "slurm-bridge"
ANNOTATION_EXTERNAL_NODE_PARTITIONS: Final = SCHEDULER_PREFIX + "external-node-partitions"
ANNOTATION_TOPOLOGY_SPEC: Final = TOPOLOGY_PREFIX + "spec"
# On a NodeSet: how long (seconds) each new worker pod waits for ANNOTATION_TOPOLOGY_SPEC before slurmd starts.
ANNOTATION_TOPOLOGY_WAIT: Final = TOPOLOGY_PREFIX + "wait-seconds"
TAINT_MANAGED_NODE: Final = SLINKY_PREFIX + "managed-node"

# NodeSet pods: the scaling mode a pod was built for, the worker toleration, the revision.
LABEL_NODESET_SCALING_MODE: Final = NODESET_PREFIX + "scaling-mode"
TAINT_NODESET_WORKER: Final = NODESET_PREFIX + "worker"
# Metacontroller stores the object it last applied here; kept pods are returned as that object.
ANNOTATION_LAST_APPLIED: Final = "metacontroller.k8s.io/last-applied-configuration"

# NodeSet status: the drain intents slurm_sync executes (list of {name, reason, epoch}, sorted by name).
STATUS_DRAINING_PODS: Final = "drainingPods"
# A drainingPods item's flag: once drained and idle, slurm_sync deletes the pod's Slurm node record, and
# the pod goes only once that record is proven absent (its replacement registers anew).
DRAIN_DELETE_NODE: Final = "deleteSlurmNode"
# A drainingPods item's epoch: the NodeSet's resourceVersion when the intent was issued, kept while it stands.
# slurm_sync's drained mark carries the epoch of the intent it answers, and the hook lets a pod go only on the
# mark of its current intent, never on one left from an earlier intent (docs/architecture.md §4.1).
DRAIN_EPOCH: Final = "epoch"
# The drained mark of a pod no NodeSet intent names (a cordon's drain, or an intent published without an epoch).
DRAINED_NO_EPOCH: Final = "true"
STATUS_ORDINAL_TO_NODE: Final = "ordinalToNode"
# NodeSet status condition types.
CONDITION_CONTROLLER_RESOLVED: Final = "ControllerResolved"
CONDITION_PODS_DRAINING: Final = "PodsDraining"
CONDITION_UNEXPECTED_PODS: Final = "UnexpectedPods"

# Status conditions of the RestApi, Accounting, Token and LoginSet parents.
CONDITION_REFERENCES_RESOLVED: Final = "ReferencesResolved"  # every referenced CR, Secret and key exists
CONDITION_AVAILABLE: Final = "Available"  # the workload's pods are ready
CONDITION_EXTERNAL: Final = "External"  # the daemon runs outside Kubernetes; no workload is managed

# Controller status condition types (with CONDITION_AVAILABLE, _REFERENCES_RESOLVED and _EXTERNAL).
# Every kind: nothing stands between the CR and working daemons (reason: the first problem; hooks/status.py).
CONDITION_READY: Final = "Ready"
# Kubernetes' pod condition and reason kube-scheduler writes for a pod it cannot place yet; the bridge writes them
# while the pod's placeholder job is pending, with Slurm's reason (`kubectl describe pod`).
CONDITION_POD_SCHEDULED: Final = "PodScheduled"
REASON_UNSCHEDULABLE: Final = "Unschedulable"
CONDITION_SERVICE_MONITOR_CREATED: Final = "ServiceMonitorCreated"  # only when metrics.serviceMonitor asks for one
# Status condition of every kind while a spec value cannot be used (children are kept as they are).
CONDITION_INVALID_SPEC: Final = "InvalidSpec"

# The bridge hooks' intents for slurm_sync and its confirmations back (hooks/bridge/*, docs/architecture.md §4).
ANNOTATION_PLACEHOLDER_GROUP: Final = (
    SCHEDULER_PREFIX + "placeholder-group"
)  # "<Kind>[.<group>]/<ns>/<name>" of the job's group
ANNOTATION_JOB_RELEASED: Final = SCHEDULER_PREFIX + "job-released"  # slurm_sync: "<job id>" this pod no longer holds
ANNOTATION_DESIRED_TAINT: Final = SCHEDULER_PREFIX + "desired-taint"  # "<key>=<value>:<effect>" slurm_sync applies
ANNOTATION_DRAIN_INTENT: Final = SCHEDULER_PREFIX + "drain-reason"  # Slurm drain reason while the node is cordoned
ANNOTATION_EXTERNAL_NODE_INTENT: Final = (
    SCHEDULER_PREFIX + "external-node-registration"
)  # JSON, see hooks/bridge/node.py
ANNOTATION_EXTERNAL_NODE_REGISTERED: Final = (
    SCHEDULER_PREFIX + "external-node-registered"
)  # slurm_sync: Slurm node name
ANNOTATION_NODE_ERROR: Final = SCHEDULER_PREFIX + "node-error"
BRIDGE_DRAIN_REASON_PREFIX: Final = "slurm-bridge:"
# Bridge settings, as annotations on the bridge DecoratorControllers (hooks get no config file).
ANNOTATION_SETTING_PARTITION: Final = SCHEDULER_PREFIX + "default-partition"
ANNOTATION_SETTING_MCS_LABEL: Final = SCHEDULER_PREFIX + "mcs-label"
ANNOTATION_SETTING_SCHEDULER_NAME: Final = SCHEDULER_PREFIX + "scheduler-name"
# Objects the bridge reads to find a pod's group (Kubernetes, JobSet, LWS and scheduler-plugins names).
LABEL_COSCHEDULING_POD_GROUP: Final = "scheduling.x-k8s.io/pod-group"
LABEL_LWS_NAME: Final = "leaderworkerset.sigs.k8s.io/name"
LABEL_LWS_GROUP_KEY: Final = "leaderworkerset.sigs.k8s.io/group-key"
LABEL_LWS_GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
LABEL_JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
# slurm_sync: digest of the placeholder body its job was last submitted or updated with (a changed
# published body of a PENDING job is sent again; survives restarts).
ANNOTATION_PLACEHOLDER_APPLIED: Final = SCHEDULER_PREFIX + "placeholder-applied"
# slurm_sync on a pod: why its published job is not submitted (fewer mapped bridge nodes than the group
# needs, Slurm refused the job); removed when the job is submitted or adopted. Not the hook's
# ANNOTATION_JOB_ERROR: the pod decorator owns that key and would clear ours.
ANNOTATION_SUBMIT_ERROR: Final = SCHEDULER_PREFIX + "submit-error"
# Kubernetes' mark of the ResourceClaim that backs a pod's DRA extended resources (pod.status.
# extendedResourceClaimStatus names it); slurm_sync makes one per bridge pod with Slurm's devices.
ANNOTATION_EXTENDED_RESOURCE_CLAIM: Final = "resource.kubernetes.io/extended-resource-claim"
# The built-in (Workload API) PodGroup condition slurm_sync sets once every member pod is bound (vector 18).
CONDITION_POD_GROUP_SCHEDULED: Final = "PodGroupScheduled"
# NodeSet finalize: PVCs kept for whenDeleted=Retain until slurm_sync removed the NodeSet's ownerReference.
CONDITION_RETAINED_CLAIMS: Final = "RetainedClaimsOwned"
# Node annotation: comma-separated features slurm_sync applies as `k8s/<value>` to the Slurm node of each NodeSet pod
# there.
FEATURES_PREFIX: Final = "features.slinky.slurm.net/"
ANNOTATION_FEATURES_SPEC: Final = FEATURES_PREFIX + "spec"
# NodeSet updateStrategy ScheduledUpdate (a Slurm maintenance reservation, docs/architecture.md §4). The hook
# publishes the wanted reservation as status.reservation ({name, startTime, duration, flags,
# nodes}); no status.reservation means "no reservation of ours for this NodeSet". slurm_sync
# creates, updates or deletes it and reports on the NodeSet in ANNOTATION_RESERVATION_OBSERVED,
# JSON {"name", "state" (one of RESERVATION_STATE_*), "active", "maintenance" (Slurm nodes in
# MAINTENANCE under this reservation, sorted), "error" (the last Slurm error or note, "" if none)}.
# slurm_sync touches only reservations named RESERVATION_PREFIX + a NodeSet of its Controller; it
# marks those it creates with the comment RESERVATION_MARK + "<namespace>/<nodeset> <uid>" and
# deletes a reservation whose NodeSet is gone only if that mark is listed back.
STATUS_RESERVATION: Final = "reservation"
RESERVATION_PREFIX: Final = "SlurmOperatorMaint-"
RESERVATION_USER: Final = "slurm"
RESERVATION_FLAGS: Final = ("MAINT", "IGNORE_JOBS")
ANNOTATION_RESERVATION_OBSERVED: Final = NODESET_PREFIX + "reservation-observed"
RESERVATION_STATE_CREATED: Final = "Created"  # the reservation exists in Slurm
RESERVATION_STATE_ABSENT: Final = "Absent"  # no reservation of this name exists in Slurm
CONDITION_RESERVATION_CREATED: Final = "ReservationCreated"
# scheduledUpdate.flags accepted: Slurm 26.05 lists each back unchanged (checked against slurmrestd
# v0.0.45). Not accepted: NO_* (never listed), SKIP/DURATION_*/REPLACE* (dropped or refused),
# TIME_FLOAT (start relative to now), WEEKDAY/WEEKEND (moved by Slurm without a fixed period).
RESERVATION_USER_FLAGS: Final = frozenset(
    {
        "MAINT",
        "IGNORE_JOBS",
        "DAILY",
        "WEEKLY",
        "HOURLY",
        "STATIC",
        "OVERLAP",
        "PURGE_COMP",
        "MAGNETIC",
        "FLEX",
        "ANY_NODES",
        "USER_DELETE",
        "NO_HOLD_JOBS_AFTER_END",
    }
)
RESERVATION_MARK: Final = "slinky-metacontroller "
# slurm_sync: the prefix of the Slurm node features it owns (`k8s/<value>` from ANNOTATION_FEATURES_SPEC);
# features without it are someone else's and are never removed.
K8S_FEATURE_PREFIX: Final = "k8s/"
# Deleting a NodeSet in a safe order. The Controller hook renders a deleting NodeSet's partition with
# State=PARTITION_STATE_DELETING (Slurm refuses new jobs there; queued ones stay); finalize condemns
# every pod (drain before delete); slurm_sync reports on the NodeSet in ANNOTATION_DELETION_OBSERVED,
# JSON {"pendingJobs": [ids of jobs pending in the NodeSet's partition, sorted], "cancelAt": RFC 3339
# time after which slurm_sync cancels them on purpose, or null, "nodesLeft": [the NodeSet's Slurm node
# records still in slurmctld, sorted], "error": the last Slurm error or note, "" if none}, and deletes
# the node records once the NodeSet's pods are gone. Finalize finishes only on a report with no pending
# job and no node left, so the NodeSet's lines leave slurm.conf last.
ANNOTATION_DELETION_OBSERVED: Final = NODESET_PREFIX + "deletion-observed"
# Elastic NodeSets (docs/architecture.md §4.9): slurm_sync reports the power state Slurm gives each on-demand
# node of the NodeSet, JSON {"up": [nodes Slurm is powering up or has up], "down": [nodes powering down or
# powered down], "resumeFailed": [nodes not up within ResumeTimeout, DOWN until slurm_sync resumes them]}, each
# sorted; a node Slurm's listing lacks is in none (unknown: the hook neither creates nor removes its pod).
ANNOTATION_POWER_OBSERVED: Final = NODESET_PREFIX + "power-observed"
CONDITION_DELETION_BLOCKED: Final = "DeletionBlocked"  # NodeSet finalize: what the deletion waits for
PARTITION_STATE_DELETING: Final = "DRAIN"
# NodeSet status: pods whose drained/absent mark contradicts busy evidence (a busy SlurmNodeState
# condition, LABEL_POD_PROTECT, a job-end deadline not passed); the hook keeps them.
CONDITION_INCONSISTENT_PODS: Final = "InconsistentPods"
# The administrator's escape for deleting a NodeSet whose Controller is gone: "true" on the NodeSet
# makes finalize release every pod at once, busy or not (their jobs end), and stop waiting for
# slurm_sync's deletion report and reservation. Any other value is ignored.
ANNOTATION_FORCE_DELETE: Final = NODESET_PREFIX + "force-delete"
