"""The cluster lab's Python side (hack/cluster/up.sh runs both commands).

`python -m lab setup --kubeconfig K --lab-dir D [--hooks-url U] [--cluster chart|examples]`: apply what the
Slurm cluster needs besides charts/slurm (or, with `--cluster examples`, the cluster of examples/crs/), and with
`--hooks-url` (the developer's switch: the hook server runs from the work tree) the project's CRDs and
CompositeControllers first, pointed at U; without it the operator chart installed them (setup.py).
`python -m lab run --kubeconfig K --lab-dir D --rootfs R [--nodes N] [--no-driver] [--image REF=DIR ...]`:
one process holding the node agent (scheduler and kubelets, running each `--image` from its unpacked
filesystem), the workload controllers (StatefulSet, Deployment, PVC binding) and, unless a real
Metacontroller is used, the Metacontroller stand-in, which reaches Services' hooks through the agent;
it stops everything it started on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path

from lab import agent, driver, images, kube, setup, workloads


def run(args: argparse.Namespace) -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    catalog = images.Catalog(dict(args.image))
    node_agent = agent.Agent(kube.Client(args.kubeconfig), args.lab_dir, args.rootfs, args.nodes,
                             logging.getLogger("lab.agent"), catalog)  # fmt: skip
    parts: dict[str, agent.Agent | workloads.Workloads | driver.Driver] = {
        "agent": node_agent,
        "workloads": workloads.Workloads(kube.Client(args.kubeconfig), logging.getLogger("lab.workloads")),
    }
    if not args.no_driver:
        parts["driver"] = driver.Driver(kube.Client(args.kubeconfig), logging.getLogger("lab.driver"),
                                        resolve=node_agent.service_address)  # fmt: skip
    threads = [threading.Thread(target=part.run, args=(stop,), name=name) for name, part in parts.items()]
    for thread in threads:
        thread.start()
    while not stop.wait(1):
        if not all(t.is_alive() for t in threads):
            logging.getLogger("lab").error("a part stopped: %s", [t.name for t in threads if not t.is_alive()])
            stop.set()
    for thread in threads:
        thread.join(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(prog="lab")
    commands = parser.add_subparsers(dest="command", required=True)
    set_up = commands.add_parser("setup")
    set_up.add_argument("--kubeconfig", required=True)
    set_up.add_argument("--hooks-url", help="apply the CRDs and CompositeControllers, pointed at this hook server")
    set_up.add_argument("--lab-dir", required=True, type=Path)
    set_up.add_argument(
        "--cluster",
        choices=setup.CLUSTERS,
        default="chart",
        help="chart: only what the user brings (up.sh then installs charts/slurm); examples: examples/crs/",
    )
    running = commands.add_parser("run")
    running.add_argument("--kubeconfig", required=True)
    running.add_argument("--lab-dir", required=True, type=Path)
    running.add_argument("--rootfs", required=True)
    running.add_argument("--nodes", type=int, default=6)
    running.add_argument("--no-driver", action="store_true", help="a real Metacontroller drives the hooks")
    running.add_argument(
        "--image",
        action="append",
        default=[],
        type=images.parse_image_option,
        help="REFERENCE=DIR: run this image from DIR (hack/cluster/image-rootfs.sh); repeatable",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.command == "setup":
        setup.setup(kube.Client(args.kubeconfig), args.hooks_url, args.lab_dir, cluster=args.cluster)
    else:
        run(args)


if __name__ == "__main__":
    main()
