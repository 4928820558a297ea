"""Slinky users' tooling and habits depend on these exact spellings (labels in PDB selectors,
annotations they set by hand, taints on their nodes): pin them against Slinky's, so a rename here
is a deliberate, visible break."""

import pytest

from slinky_common import names

SLINKY_SPELLINGS = {
    "LABEL_CLUSTER": "slinky.slurm.net/cluster",
    "LABEL_POD_PROTECT": "nodeset.slinky.slurm.net/pod-protect",
    "LABEL_NODESET_POD_NAME": "nodeset.slinky.slurm.net/pod-name",
    "LABEL_NODESET_POD_INDEX": "nodeset.slinky.slurm.net/pod-index",
    "LABEL_NODESET_POD_HOSTNAME": "nodeset.slinky.slurm.net/pod-hostname",
    "LABEL_NODESET_SCALING_MODE": "nodeset.slinky.slurm.net/scaling-mode",
    "LABEL_NODESET_REVISION": "controller-revision-hash",
    "LABEL_ACTIVE_CONTROLLER": "controller.slinky.slurm.net/active",
    "ANNOTATION_POD_CORDON": "nodeset.slinky.slurm.net/pod-cordon",
    "ANNOTATION_POD_CORDON_REQUESTED": "nodeset.slinky.slurm.net/pod-cordon-requested",
    "ANNOTATION_POD_DELETION_COST": "nodeset.slinky.slurm.net/pod-deletion-cost",
    "ANNOTATION_POD_DEADLINE": "nodeset.slinky.slurm.net/pod-deadline",
    "ANNOTATION_NODE_CORDON_REASON": "nodeset.slinky.slurm.net/node-cordon-reason",
    "ANNOTATION_HOSTNAME_OVERRIDE": "nodeset.slinky.slurm.net/hostname-override",
    "ANNOTATION_TOPOLOGY_SPEC": "topology.slinky.slurm.net/spec",
    "ANNOTATION_SLURM_CONFIG_HASH": "slinky.slurm.net/slurm-config-hash",
    "TAINT_NODESET_WORKER": "nodeset.slinky.slurm.net/worker",
    "LABEL_SLURM_JOB_ID": "scheduler.slinky.slurm.net/slurm-jobid",
    "ANNOTATION_SLURM_NODE": "slinky.slurm.net/slurm-node",
    "FINALIZER_SCHEDULER": "scheduler.slinky.slurm.net/finalizer",
    "LABEL_SLURM_NODE_NAME": "slinky.slurm.net/slurm-nodename",
    "LABEL_EXTERNAL_NODE": "scheduler.slinky.slurm.net/external-node",
    "ANNOTATION_EXTERNAL_NODE_PARTITIONS": "scheduler.slinky.slurm.net/external-node-partitions",
    "TAINT_MANAGED_NODE": "slinky.slurm.net/managed-node",
    "SLURMJOB_PREFIX": "slurmjob.slinky.slurm.net/",
    "DRAIN_REASON_PREFIX": "slurm-operator:",
}


@pytest.mark.parametrize(("constant", "spelling"), sorted(SLINKY_SPELLINGS.items()))
def test_names_slinky_defines_keep_slinkys_spelling(constant, spelling):
    assert getattr(names, constant) == spelling
