"""Which root filesystem and program an image runs: the cluster lab's stand-in for a container runtime's images.

Two sources, looked up in this order:

- **Unpacked images** (`--image REFERENCE=DIR`, made by hack/cluster/image-rootfs.sh): a real OCI image's own
  filesystem (`DIR/rootfs`) and its config (`DIR/config.json`: Entrypoint, Cmd, Env, WorkingDir, User), as a
  kubelet's runtime runs it. The project's image runs this way, so the lab runs what the charts deploy.
- **The lab's images**: every other container runs from the one lab root filesystem; the image's repository
  name (the last path element, without tag or digest) picks its entrypoint and default args, as Slinky's
  images define them (github.com/SlinkyProject/containers): slurmctld, slurmd, slurmdbd, slurmrestd, sackd,
  login, plus the helper images the hooks and the lab use, and the generic ones a user's pod names (alpine,
  busybox, debian, ubuntu, python: the lab's filesystem with the image's default command).

Kubernetes' rules apply to both: `command` replaces the entrypoint, `args` the default args.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

ENTRYPOINTS = "/opt/lab-image"  # where hack/cluster/images/ is mounted in the lab's own images' containers
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # a runtime's default when the image sets none


@dataclass(frozen=True)
class Image:
    entrypoint: tuple[str, ...]
    args: tuple[str, ...] = ()
    rootfs: str = ""  # "" for the lab's root filesystem
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = ""
    user: str = ""  # the image's USER: "uid", "uid:gid" or a name in its /etc/passwd

    @property
    def unpacked(self) -> bool:
        return bool(self.rootfs)


IMAGES = {
    "slurmctld": Image((f"{ENTRYPOINTS}/slurmctld",)),
    "slurmd": Image((f"{ENTRYPOINTS}/slurmd",)),
    "slurmdbd": Image(("tini", "-g", "--", "slurmdbd", "-D")),
    "slurmrestd": Image(("tini", "-g", "--", "slurmrestd"), ("0.0.0.0:6820",)),
    "sackd": Image((f"{ENTRYPOINTS}/sackd",)),
    "login": Image((f"{ENTRYPOINTS}/login",)),
    "mariadb": Image((f"{ENTRYPOINTS}/mariadb",), ("mariadbd",)),
    # generic images a user's pod may name (the bridge's workloads): the lab's filesystem, their default command
    "alpine": Image((), ("/bin/sh",)),
    "busybox": Image((), ("/bin/sh",)),
    "debian": Image((), ("bash",)),
    "ubuntu": Image((), ("bash",)),
    "python": Image((), ("python3",)),
}


class UnknownImage(ValueError):
    """An image the lab cannot run (the pod waits with ErrImagePull, as a missing image would)."""


def image_name(reference: str) -> str:
    """`ghcr.io/slinkyproject/slurmd:25.05-ubuntu24.04` -> `slurmd`."""
    name = reference.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def unpacked(directory: Path) -> Image:
    """An image hack/cluster/image-rootfs.sh unpacked: its filesystem and the config the runtime starts it with."""
    config = json.loads((directory / "config.json").read_text())
    env = dict(item.partition("=")[::2] for item in config.get("Env") or [])
    return Image(tuple(config.get("Entrypoint") or ()), tuple(config.get("Cmd") or ()), str(directory / "rootfs"),
                 env, config.get("WorkingDir") or "", config.get("User") or "")  # fmt: skip


def parse_image_option(text: str) -> tuple[str, Path]:
    """`REFERENCE=DIR` of `lab run --image`, checked: DIR must hold what image-rootfs.sh writes."""
    reference, sep, directory = text.partition("=")
    path = Path(directory)
    if not sep or not reference or not (path / "rootfs").is_dir() or not (path / "config.json").is_file():
        raise ValueError(f"--image {text!r}: want REFERENCE=DIR, DIR holding rootfs/ and config.json")
    return reference, path


class Catalog:
    """The images this lab runs: the unpacked ones by exact reference, then the lab's own by name."""

    def __init__(self, unpacked_dirs: dict[str, Path] | None = None) -> None:
        self.unpacked = {ref: unpacked(path) for ref, path in (unpacked_dirs or {}).items()}

    def image(self, reference: str) -> Image:
        found = self.unpacked.get(reference) or IMAGES.get(image_name(reference))
        if found is None:
            known = [*self.unpacked, *IMAGES]
            raise UnknownImage(f"image {reference!r} is not one the cluster lab runs ({', '.join(known)})")
        return found

    def argv(self, container: dict) -> list[str]:
        """The container's full command line, by Kubernetes' command/args rules over the image's."""
        image = self.image(container.get("image", ""))
        if container.get("command"):
            return [*container["command"], *container.get("args", [])]
        return [*image.entrypoint, *container.get("args", image.args)]
