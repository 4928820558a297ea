"""Which program an image runs: the cluster lab's stand-in for image ENTRYPOINT and CMD.

Every container runs from the one lab root filesystem; the image's repository name (the last path
element, without tag or digest) picks its entrypoint and default args, as Slinky's images define them
(github.com/SlinkyProject/containers): slurmctld, slurmd, slurmdbd, slurmrestd, sackd, login, plus the
helper images the hooks and the lab use. Kubernetes' rules apply: `command` replaces the entrypoint,
`args` the default args.
"""

from __future__ import annotations

from dataclasses import dataclass

ENTRYPOINTS = "/opt/lab-image"  # where hack/cluster/images/ is mounted in every container


@dataclass(frozen=True)
class Image:
    entrypoint: tuple[str, ...]
    args: tuple[str, ...] = ()


IMAGES = {
    "slurmctld": Image((f"{ENTRYPOINTS}/slurmctld",)),
    "slurmd": Image((f"{ENTRYPOINTS}/slurmd",)),
    "slurmdbd": Image(("tini", "-g", "--", "slurmdbd", "-D")),
    "slurmrestd": Image(("tini", "-g", "--", "slurmrestd"), ("0.0.0.0:6820",)),
    "sackd": Image((f"{ENTRYPOINTS}/sackd",)),
    "login": Image((f"{ENTRYPOINTS}/login",)),
    "mariadb": Image((f"{ENTRYPOINTS}/mariadb",), ("mariadbd",)),
    "alpine": Image((), ("/bin/sh",)),
    "busybox": Image((), ("/bin/sh",)),
}


class UnknownImage(ValueError):
    """An image the lab cannot run (the pod waits with ErrImagePull, as a missing image would)."""


def image_name(reference: str) -> str:
    """`ghcr.io/slinkyproject/slurmd:25.05-ubuntu24.04` -> `slurmd`."""
    name = reference.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def argv(container: dict) -> list[str]:
    """The container's full command line, by Kubernetes' command/args rules over the image's."""
    image = IMAGES.get(image_name(container.get("image", "")))
    if image is None:
        raise UnknownImage(f"image {container.get('image')!r} is not one the cluster lab runs ({', '.join(IMAGES)})")
    if container.get("command"):
        return [*container["command"], *container.get("args", [])]
    return [*image.entrypoint, *container.get("args", image.args)]
