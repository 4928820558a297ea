"""What the pods of every component of one Slurm cluster share: images, the slurm user, the DNS domain
the hooks assume, and slurmdbd's derived name."""

from __future__ import annotations

SSH_PORT = 22
SLURM_UID = 401  # the `slurm` user in Slinky's images
SLURM_USER = "slurm"
# Kubernetes' default cluster DNS domain; hooks cannot ask the cluster, so searches assume it.
CLUSTER_DOMAIN = "cluster.local"
# Images when a CR names none (Slinky's chart defaults); a Deployment without an image is rejected.
IMAGE_REPOSITORY = "ghcr.io/slinkyproject"
IMAGE_TAG = "26.05-ubuntu26.04"


def default_image(component: str) -> str:
    return f"{IMAGE_REPOSITORY}/{component}:{IMAGE_TAG}"


def accounting_host(accounting: str) -> str:
    """slurmdbd's pod hostname and Service name (`<name>-accounting`)."""
    return f"{accounting}-accounting"
