"""The node agent: the cluster lab's stand-in for kube-scheduler and the kubelet of every lab Node.

- Nodes: `lab-node-1..N` as Node objects, Ready, labelled like real nodes.
- Scheduling: a pending pod for the default scheduler is bound (pods/binding) to the first Node that
  passes its nodeSelector, required node affinity, taints (NoSchedule/NoExecute vs tolerations) and
  required pod anti-affinity on kubernetes.io/hostname. Pods for other schedulers are left alone.
- Running: each bound pod becomes a `PodWorker` (runtime.py): sandbox, init containers in order
  (restartable ones as sidecars), containers, probes, restarts, status written back when it changed,
  preStop and the grace period on deletion, then the final delete with grace 0.
- Images: the lab's own from its root filesystem, and unpacked OCI images (the project's) from their own
  filesystem and config (images.py), so the charts' Deployments run what they deploy.
- Credentials: each pod's ServiceAccount token, bound to the pod, with the CA and namespace where in-cluster
  clients read them (serviceaccount.py), and KUBERNETES_SERVICE_HOST/PORT naming the lab's relay to the API
  server (proxy.py), unless the pod or its ServiceAccount turns automounting off.
- Names: the kubelet's hosts file (the pod itself, written once) and resolv.conf, whose nameserver
  (dns.py, on the bridge's gateway) answers Services and headless Services' pods as a cluster's DNS does,
  from records replaced whole each pass, and any other name NXDOMAIN at once.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3

from lab import dns, images, kube, proxy, runtime, serviceaccount, volumes
from slinky_common import names

Obj = dict[str, Any]
IMAGES_DIR = Path(__file__).resolve().parent.parent / "images"
urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # HTTPS probes check no certificate, by design
OPERATOR_NAMESPACE = "slinky"  # docs/getting-started.md's namespace for charts/slurm-operator


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


# ---------------------------------------------------------------- scheduling


def _match_expression(labels: dict[str, str], expr: Obj) -> bool:
    value, op = labels.get(expr["key"]), expr["operator"]
    if op == "In":
        return value in expr.get("values", [])
    if op == "NotIn":
        return value not in expr.get("values", [])
    if op == "Exists":
        return expr["key"] in labels
    if op == "DoesNotExist":
        return expr["key"] not in labels
    return False


def selector_matches(selector: Obj, labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()) and all(
        _match_expression(labels, e) for e in selector.get("matchExpressions") or []
    )


def _tolerated(taint: Obj, tolerations: list[Obj]) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint["effect"]:
            continue
        if tol.get("operator") == "Exists" and (not tol.get("key") or tol["key"] == taint["key"]):
            return True
        if tol.get("key") == taint["key"] and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def node_fits(pod: Obj, node: Obj, pods_on_node: list[Obj]) -> bool:
    """The scheduler's filters our pods use."""
    labels = node["metadata"].get("labels") or {}
    spec = pod["spec"]
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    affinity = spec.get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(all(_match_expression(labels, e) for e in t.get("matchExpressions") or []) for t in terms):
        return False
    for taint in node["spec"].get("taints") or []:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not _tolerated(taint, spec.get("tolerations") or []):
            return False
    anti = (affinity.get("podAntiAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []
    for term in anti:
        if term.get("topologyKey") != "kubernetes.io/hostname":
            continue
        for other in pods_on_node:
            same_ns = other["metadata"]["namespace"] in (term.get("namespaces") or [pod["metadata"]["namespace"]])
            if same_ns and selector_matches(term.get("labelSelector") or {}, other["metadata"].get("labels") or {}):
                return False
    return True


def lab_node(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              "kubernetes.io/arch": "amd64"}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "cluster lab node agent", "lastHeartbeatTime": now(),
                            "lastTransitionTime": now()}],
            "addresses": [{"type": "InternalIP", "address": str(runtime.GATEWAY)},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "lab", "containerRuntimeVersion": "lab://namespaces",
                         "operatingSystem": "linux", "architecture": "amd64", "osImage": "Debian sid (cluster lab)",
                         "kernelVersion": "", "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
        },
    }  # fmt: skip


# ---------------------------------------------------------------- names


def hosts_file(pod: Obj, address: str) -> str:
    """The pod's /etc/hosts as the kubelet writes it: localhost and the pod itself. Every other name comes
    from the cluster DNS (dns.py), so this file never changes while the pod runs."""
    ns = pod["metadata"]["namespace"]
    spec = pod["spec"]
    host = spec.get("hostname") or pod["metadata"]["name"]
    names = [host]
    if spec.get("subdomain"):
        names[:0] = [f"{host}.{spec['subdomain']}.{ns}.svc.cluster.local", f"{host}.{spec['subdomain']}.{ns}"]
    lines = ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             f"{address}\t{' '.join(names)}"]  # fmt: skip
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- containers


@dataclass
class Probe:
    """One probe's schedule and result counters (kubelet semantics)."""

    spec: Obj
    kind: str
    next_at: float = 0.0
    successes: int = 0
    failures: int = 0
    ok: bool = False

    def due(self, now_s: float, started: float) -> bool:
        if now_s < started + self.spec.get("initialDelaySeconds", 0) or now_s < self.next_at:
            return False
        self.next_at = now_s + self.spec.get("periodSeconds", 10)
        return True

    def record(self, success: bool) -> None:
        if success:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= self.spec.get("successThreshold", 1):
                self.ok = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.failures >= self.spec.get("failureThreshold", 3):
                self.ok = False


@dataclass
class Container:
    spec: Obj
    init: bool = False
    process: runtime.Process | None = None
    restarts: int = 0
    last_exit: Obj | None = None
    waiting: str | None = "ContainerCreating"
    waiting_message: str = ""
    restart_at: float = 0.0
    started_probe: Probe | None = None
    ready_probe: Probe | None = None
    live_probe: Probe | None = None
    terminated: Obj | None = None

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def sidecar(self) -> bool:
        return self.init and self.spec.get("restartPolicy") == "Always"

    def reset_probes(self) -> None:
        self.started_probe = Probe(self.spec["startupProbe"], "startup") if "startupProbe" in self.spec else None
        self.ready_probe = Probe(self.spec["readinessProbe"], "readiness") if "readinessProbe" in self.spec else None
        self.live_probe = Probe(self.spec["livenessProbe"], "liveness") if "livenessProbe" in self.spec else None

    @property
    def started(self) -> bool:
        running = self.process is not None and self.process.exit_code() is None
        return running and (self.started_probe is None or self.started_probe.ok)

    @property
    def ready(self) -> bool:
        if self.init and not self.sidecar:
            return self.terminated is not None and self.terminated.get("exitCode") == 0
        return self.started and (self.ready_probe is None or self.ready_probe.ok)


@dataclass
class PodWorker:
    """One pod on one lab node, from sandbox to final delete."""

    agent: Agent
    pod: Obj
    address: str
    dir: Path
    network: runtime.Network | None = None
    containers: list[Container] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    last_status: Obj | None = None
    failure: str = ""
    start_time: str = field(default_factory=now)
    ran: bool = False
    automount: bool | None = None  # whether the pod gets its ServiceAccount's token; None until its account is read
    credentials: serviceaccount.Credentials | None = None

    @property
    def key(self) -> str:
        return pod_key(self.pod)

    @property
    def log_dir(self) -> Path:
        """Container logs, kept after the pod is gone: logs/pods/<namespace>_<pod>/<container>.log."""
        meta = self.pod["metadata"]
        return self.agent.lab_dir / "logs" / "pods" / f"{meta['namespace']}_{meta['name']}"

    # --- lifecycle
    def run(self) -> None:
        try:
            self.network = runtime.Network.create(self.dir.name, self.address)
            self.containers = [Container(c, init=True) for c in self.pod["spec"].get("initContainers", [])]
            self.containers += [Container(c) for c in self.pod["spec"]["containers"]]
            while not self.stop.is_set():
                if self.agent.dark(self.pod["spec"].get("nodeName", "")):
                    self.stop.wait(0.5)  # the kubelet is gone: containers run on, nothing is reported or deleted
                    continue
                if self.pod["metadata"].get("deletionTimestamp"):
                    self.terminate()
                    return
                self.sync_volumes()
                self.step()
                self.write_status()
                self.stop.wait(0.5)
        except Exception:
            self.agent.log.exception("pod %s: worker failed", self.key)
        finally:
            self.kill_all()

    def step(self) -> None:
        """Start what may start, restart what ended, probe what runs."""
        for container in self.containers:
            if container.init and not container.sidecar:
                if container.terminated and container.terminated.get("exitCode") == 0:
                    continue
                self.run_container(container)
                return  # the next init container waits for this one
            self.run_container(container)
            if container.sidecar and not container.started:
                return  # sidecars start in order, each started before the next

    def run_container(self, container: Container) -> None:
        now_s = time.time()
        if container.terminated is not None:
            return  # ended for good: its restart policy says not to start it again
        if container.process is None:
            if now_s >= container.restart_at and not self.held(container):
                self.start(container)
            return
        code = container.process.exit_code()
        if code is None:
            self.probe(container, now_s)
            return
        container.last_exit = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                               "startedAt": _iso(container.process.started), "finishedAt": now()}  # fmt: skip
        container.process = None
        policy = (
            container.spec.get("restartPolicy") if container.init else self.pod["spec"].get("restartPolicy", "Always")
        )
        if container.init and not container.sidecar:
            policy = "OnFailure" if self.pod["spec"].get("restartPolicy", "Always") != "Never" else "Never"
        if policy == "Never" or (policy == "OnFailure" and code == 0):
            container.terminated = container.last_exit
            container.waiting = None
            return
        container.restarts += 1
        backoff = min(30.0, 2.0 ** min(container.restarts, 5))
        container.restart_at = now_s + backoff
        container.waiting, container.waiting_message = "CrashLoopBackOff", f"back-off {backoff:.0f}s restarting"
        self.agent.log.info("pod %s: container %s exited %s; restart in %.0fs", self.key, container.name, code, backoff)

    def held(self, container: Container) -> bool:
        """A test's way to keep a container down, as a node whose runtime cannot start it would: while the
        file containers/<name>/hold exists in the pod's directory, or hold/<namespace>_<pod>/<name> in the lab's
        (for a pod not made yet), the container is not (re)started."""
        meta = self.pod["metadata"]
        ahead = self.agent.lab_dir / "hold" / f"{meta['namespace']}_{meta['name']}" / container.name
        return (self.dir / "containers" / container.name / "hold").exists() or ahead.exists()

    def start(self, container: Container) -> None:
        try:
            spec = self.container_spec(container.spec)
        except (images.UnknownImage, volumes.MissingSource, KeyError, ValueError) as err:
            container.waiting = "ErrImagePull" if isinstance(err, images.UnknownImage) else "CreateContainerConfigError"
            container.waiting_message = str(err)
            container.restart_at = time.time() + 2
            return
        state = self.dir / "containers" / container.name
        rootfs = self.agent.catalog.image(container.spec.get("image", "")).rootfs or self.agent.rootfs
        container.process = runtime.start_container(spec, self.network.name if self.network else "", rootfs,
                                                    state, self.log_dir / f"{container.name}.log")  # fmt: skip
        container.waiting, container.waiting_message = None, ""
        container.reset_probes()
        self.agent.log.info("pod %s: started %s (%s)", self.key, container.name, " ".join(spec.argv)[:120])

    def terminate(self) -> None:
        """Graceful deletion: preStop, TERM, the grace period, KILL, then the kubelet's final delete."""
        grace = self.pod["metadata"].get("deletionGracePeriodSeconds", 30)
        deadline = time.time() + grace
        for container in reversed(self.containers):
            hook = (container.spec.get("lifecycle") or {}).get("preStop")
            if hook and container.process and container.process.exit_code() is None:
                ok, detail = self.handler(container, hook, max(1.0, deadline - time.time()))
                self.agent.log.info("pod %s: preStop of %s: %s %s", self.key, container.name, ok, detail[:200])
        for container in self.containers:
            if container.process:
                container.process.signal(signal.SIGTERM)
        while time.time() < deadline and any(c.process and c.process.exit_code() is None for c in self.containers):
            time.sleep(0.2)
        self.kill_all()
        self.record_ends()
        self.write_status()  # as a kubelet: the terminal phase first (what holds the pod's finalizers reads it)
        self.agent.finish_deletion(self)

    def record_ends(self) -> None:
        """Each stopped container's end, in the runtime's words: its exit code, 128 + the signal that killed it."""
        for container in self.containers:
            if container.process is None:
                continue
            code = container.process.exit_code()
            code = 137 if code is None else 128 - code if code < 0 else code
            container.terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                    "startedAt": _iso(container.process.started), "finishedAt": now()}  # fmt: skip
            container.process = None

    def kill_all(self) -> None:
        for container in self.containers:
            if container.process and container.process.exit_code() is None:
                container.process.signal(signal.SIGKILL)
                try:
                    container.process.popen.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.agent.log.warning("pod %s: %s did not die", self.key, container.name)
        if self.network:
            self.network.delete()
            self.network = None

    # --- building a container
    def container_spec(self, c: Obj) -> runtime.ContainerSpec:
        image = self.agent.catalog.image(c.get("image", ""))
        pod_sc = self.pod["spec"].get("securityContext") or {}
        uid, gid = self.identity(c)
        groups = sorted(
            {gid, *([pod_sc["fsGroup"]] if "fsGroup" in pod_sc else []), *pod_sc.get("supplementalGroups", [])}
        )
        env = self.env(c, image)
        argv = [_expand(a, env) for a in self.agent.catalog.argv(c)]
        return runtime.ContainerSpec(
            name=c["name"], argv=argv, env=env, workdir=c.get("workingDir") or image.workdir or "/", uid=uid, gid=gid,
            groups=groups, mounts=self.mounts(c, image),
            hostname=(self.pod["spec"].get("hostname") or self.pod["metadata"]["name"])[:63],
        )  # fmt: skip

    def identity(self, c: Obj) -> tuple[int, int]:
        """The container's user and group: its securityContext's, else the pod's, else the image's USER."""
        sc = {**(self.pod["spec"].get("securityContext") or {}), **(c.get("securityContext") or {})}
        image = self.agent.catalog.image(c.get("image", ""))
        rootfs = image.rootfs or self.agent.rootfs
        image_uid, image_gid = self.agent.image_user(image.user, rootfs)
        uid = int(sc.get("runAsUser", image_uid))
        return uid, int(
            sc.get("runAsGroup", image_gid if "runAsUser" not in sc else self.agent.primary_gid(uid, rootfs))
        )

    def env(self, c: Obj, image: images.Image) -> dict[str, str]:
        """The runtime's defaults, the image's Env, the kubelet's service variables, then the container's own."""
        host = self.pod["spec"].get("hostname") or self.pod["metadata"]["name"]
        env: dict[str, str] = {"PATH": images.PATH, "HOSTNAME": host, "HOME": "/root", "LANG": "C.UTF-8"}
        if image.unpacked:
            env = {"PATH": images.PATH, "HOSTNAME": host, "HOME": "/", **image.env}
        env.update(self.agent.service_env())
        stores = self.agent.stores
        ns = self.pod["metadata"]["namespace"]
        for source in c.get("envFrom") or []:
            kind = "Secret" if "secretRef" in source else "ConfigMap"
            ref = source.get("secretRef") or source.get("configMapRef") or {}
            obj = stores[kind].get(f"{ns}/{ref.get('name')}")
            if obj is None:
                if ref.get("optional"):
                    continue
                raise volumes.MissingSource(f"{kind} {ns}/{ref.get('name')} not found")
            data = volumes._decoded(obj) if kind == "Secret" else volumes._configmap_data(obj)
            env.update({source.get("prefix", "") + k: v.decode() for k, v in data.items()})
        for var in c.get("env") or []:
            env[var["name"]] = self.env_value(var, env, c["name"])
        return env

    def env_value(self, var: Obj, env: dict[str, str], container: str) -> str:
        if "valueFrom" not in var:
            return _expand(var.get("value", ""), env)
        source = var["valueFrom"]
        if "fieldRef" in source:
            return volumes.field_value({**self.pod, "status": self.status_base()}, source["fieldRef"]["fieldPath"])
        if "resourceFieldRef" in source:
            return volumes.resource_value(self.pod, source["resourceFieldRef"], container)
        kind = "Secret" if "secretKeyRef" in source else "ConfigMap"
        ref = source.get("secretKeyRef") or source.get("configMapKeyRef") or {}
        obj = self.agent.stores[kind].get(f"{self.pod['metadata']['namespace']}/{ref.get('name')}")
        data = {} if obj is None else (volumes._decoded(obj) if kind == "Secret" else volumes._configmap_data(obj))
        if ref.get("key") not in data:
            if ref.get("optional"):
                return ""
            raise volumes.MissingSource(f"{kind} {ref.get('name')} has no key {ref.get('key')!r}")
        return data[ref["key"]].decode()

    def mounts(self, c: Obj, image: images.Image) -> list[runtime.Mount]:
        out = [runtime.Mount(str(self.dir / "hosts"), "/etc/hosts", True),
               runtime.Mount(str(self.dir / "resolv.conf"), "/etc/resolv.conf", True)]  # fmt: skip
        if not image.unpacked:  # the lab's own images' entrypoints
            out.append(runtime.Mount(str(IMAGES_DIR), images.ENTRYPOINTS, True))
        if self.automount is None:  # its ServiceAccount not read yet: never start a container without its token
            raise volumes.MissingSource(f"ServiceAccount {serviceaccount.account_name(self.pod)} not read yet")
        if self.automount:
            if self.credentials is None:
                raise volumes.MissingSource(f"no token yet for ServiceAccount {serviceaccount.account_name(self.pod)}")
            out.append(runtime.Mount(str(self.dir / "serviceaccount"), serviceaccount.MOUNT_PATH, True))
        by_name = {v["name"]: v for v in self.pod["spec"].get("volumes", [])}
        for vm in c.get("volumeMounts") or []:
            source = self.volume_dir(by_name[vm["name"]])
            if vm.get("subPath"):
                source = source / vm["subPath"]
            out.append(runtime.Mount(str(source), vm["mountPath"], bool(vm.get("readOnly"))))
        return out

    def volume_dir(self, volume: Obj) -> Path:
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            path = self.agent.lab_dir / "pvc" / self.pod["metadata"]["namespace"] / claim
        elif "hostPath" in volume:
            return Path(volume["hostPath"]["path"])
        else:
            path = self.dir / "volumes" / volume["name"]
        if not path.exists():
            path.mkdir(parents=True)
            fs_group = (self.pod["spec"].get("securityContext") or {}).get("fsGroup")
            if fs_group is not None and volumes.desired_files(volume, self.pod, self.agent.stores) is None:
                shutil.chown(path, group=fs_group)
                path.chmod(0o2777 if "emptyDir" in volume else 0o2775)
            elif "emptyDir" in volume:
                path.chmod(0o777)
        return path

    def sync_volumes(self) -> None:
        fs_group = (self.pod["spec"].get("securityContext") or {}).get("fsGroup")
        for volume in self.pod["spec"].get("volumes", []):
            try:
                files = volumes.desired_files(volume, {**self.pod, "status": self.status_base()}, self.agent.stores)
            except volumes.MissingSource as err:
                self.failure = str(err)
                continue
            if files is not None:
                volumes.write_atomic(self.volume_dir(volume), files, volumes.default_mode(volume), fs_group)
        self.sync_credentials(fs_group)
        self.agent.write_hosts(self)

    def sync_credentials(self, fs_group: int | None) -> None:
        """The pod's ServiceAccount token volume: made before its containers start, renewed before it expires."""
        ns = self.pod["metadata"]["namespace"]
        try:
            if self.automount is None:
                account = self.agent.client.get(kube.SERVICEACCOUNTS, ns, serviceaccount.account_name(self.pod))
                self.automount = serviceaccount.automount(self.pod, account)
            if not self.automount or (self.credentials and time.time() < self.credentials.renew_at):
                return
            credentials = serviceaccount.request_token(self.agent.client, self.pod)
        except (kube.ApiError, requests.RequestException) as err:  # unknown: the containers wait, the next pass retries
            self.failure = f"ServiceAccount {ns}/{serviceaccount.account_name(self.pod)}: no token: {err}"
            return
        volumes.write_atomic(self.dir / "serviceaccount", credentials.files, 0o644, fs_group)
        self.credentials = credentials

    # --- probes and handlers
    def probe(self, container: Container, now_s: float) -> None:
        started = container.process.started if container.process else now_s
        if container.started_probe and not container.started_probe.ok:
            probe = container.started_probe
            if probe.due(now_s, started):
                probe.record(self.handler(container, probe.spec, probe.spec.get("timeoutSeconds", 1))[0])
                if probe.failures >= probe.spec.get("failureThreshold", 3):
                    self.restart_unhealthy(container, "startup")
            return
        for probe in (container.ready_probe, container.live_probe):
            if probe and probe.due(now_s, started):
                probe.record(self.handler(container, probe.spec, probe.spec.get("timeoutSeconds", 1))[0])
                if probe.kind == "liveness" and probe.failures >= probe.spec.get("failureThreshold", 3):
                    self.restart_unhealthy(container, "liveness")

    def restart_unhealthy(self, container: Container, which: str) -> None:
        self.agent.log.info("pod %s: %s probe of %s failed; killing it", self.key, which, container.name)
        if container.process:
            container.process.signal(signal.SIGKILL)

    def handler(self, container: Container, spec: Obj, timeout: float) -> tuple[bool, str]:
        """Run an exec, httpGet or tcpSocket handler (probe or lifecycle hook)."""
        try:
            if "exec" in spec:
                pid = container.process.init_pid() if container.process else None
                if pid is None:
                    return False, "not running"
                uid, gid = self.identity(container.spec)
                done = runtime.exec_in(pid, spec["exec"]["command"], uid, gid, timeout)
                return done.returncode == 0, (done.stdout + done.stderr).strip()
            port = self.port(container, (spec.get("httpGet") or spec.get("tcpSocket"))["port"])
            if "httpGet" in spec:
                get = spec["httpGet"]
                headers = {h["name"]: h["value"] for h in get.get("httpHeaders", [])}
                # HTTPS as the kubelet probes it: no certificate check (a probe asks "up?", not "who?")
                scheme = str(get.get("scheme") or "HTTP").lower()
                answer = requests.get(f"{scheme}://{self.address}:{port}{get.get('path', '/')}", headers=headers,
                                      timeout=max(timeout, 1), verify=False)  # fmt: skip
                return 200 <= answer.status_code < 400, str(answer.status_code)
            with socket.create_connection((self.address, port), timeout=timeout):
                return True, "open"
        except (OSError, requests.RequestException, subprocess.TimeoutExpired) as err:
            return False, str(err)

    def port(self, container: Container, port: int | str) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for c in self.pod["spec"]["containers"] + self.pod["spec"].get("initContainers", []):
            for p in c.get("ports") or []:
                if p.get("name") == port:
                    return int(p["containerPort"])
        raise ValueError(f"no port named {port!r} in {container.name}")

    # --- status
    def status_base(self) -> Obj:
        return {"podIP": self.address, "hostIP": str(runtime.GATEWAY), "podIPs": [{"ip": self.address}]}

    def status(self) -> Obj:
        init = [c for c in self.containers if c.init]
        main = [c for c in self.containers if not c.init]
        initialized = all(c.ready if not c.sidecar else c.started for c in init)
        running = initialized and all(c.process and c.process.exit_code() is None for c in main)
        ready = running and all(c.ready for c in main) and all(c.ready for c in init if c.sidecar)
        self.ran = self.ran or any(c.process for c in main)
        phase = self.phase(init, main)
        conditions = [
            ("PodReadyToStartContainers", True), ("Initialized", initialized), ("Ready", ready),
            ("ContainersReady", ready), ("PodScheduled", True),
        ]  # fmt: skip
        ended = {"reason": "PodCompleted"} if phase in ("Succeeded", "Failed") else {}
        return {
            **self.status_base(),
            "phase": phase,
            "startTime": self.start_time,
            "qosClass": "BestEffort",
            "conditions": [
                {"type": t, "status": "True" if ok else "False", **(ended if t in ("Ready", "ContainersReady") else {})}
                for t, ok in conditions
            ],
            "initContainerStatuses": [self.container_status(c) for c in init],
            "containerStatuses": [self.container_status(c) for c in main],
        }

    def phase(self, init: list[Container], main: list[Container]) -> str:
        """Kubernetes' pod phase: Succeeded or Failed once every container has ended for good (its restart policy
        starts none again: Never, or OnFailure after exit 0) or an init container failed under Never; Running
        once a container has run (a crashed one waiting in back-off keeps the pod Running); else Pending."""
        if any(c.terminated and c.terminated.get("exitCode") != 0 for c in init if not c.sidecar):
            return "Failed"
        if main and all(c.terminated for c in main):
            return "Succeeded" if all(c.terminated and c.terminated.get("exitCode") == 0 for c in main) else "Failed"
        return "Running" if self.ran else "Pending"

    def container_status(self, c: Container) -> Obj:
        if c.process and c.process.exit_code() is None:
            state: Obj = {"running": {"startedAt": _iso(c.process.started)}}
        elif c.terminated:
            state = {"terminated": c.terminated}
        else:
            state = {
                "waiting": {
                    "reason": c.waiting or "ContainerCreating",
                    **({"message": c.waiting_message} if c.waiting_message else {}),
                }
            }
        out = {"name": c.name, "image": c.spec.get("image", ""), "imageID": "", "ready": c.ready,
               "started": c.started, "restartCount": c.restarts, "state": state,
               "containerID": f"lab://{self.dir.name}/{c.name}/{c.restarts}"}  # fmt: skip
        if c.last_exit and c.restarts:
            out["lastState"] = {"terminated": c.last_exit}
        return out

    def write_status(self) -> None:
        status = self.status()
        if status == self.last_status:
            return
        old = {k: v for k, v in (self.pod.get("status") or {}).items()}
        merged = {**old, **status}
        # keep each condition's transition time while its status stays
        previous = {c["type"]: c for c in old.get("conditions", [])}
        for cond in merged["conditions"]:
            prev = previous.get(cond["type"])
            cond["lastTransitionTime"] = (
                prev.get("lastTransitionTime", now()) if prev and prev["status"] == cond["status"] else now()
            )
            cond["lastProbeTime"] = None
        extra = [c for c in old.get("conditions", []) if c["type"] not in {x["type"] for x in merged["conditions"]}]
        merged["conditions"] += extra
        try:
            self.pod = self.agent.client.update_status(kube.PODS, {**self.pod, "status": merged})
            self.last_status = status
        except kube.ApiError as err:
            if err.status == 404:
                self.stop.set()
            # a conflict: the next pass writes again from the fresh pod


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion ($$ escapes, unknown references kept as written)."""

    def one(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        return env.get(match[1], match[0])

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", one, text)


# ---------------------------------------------------------------- the agent


class Agent:
    """Nodes, scheduling and every pod of the lab's nodes."""

    def __init__(self, client: kube.Client, lab_dir: Path, rootfs: str, nodes: int = 6,
                 log: logging.Logger | None = None, catalog: images.Catalog | None = None) -> None:  # fmt: skip
        self.client = client
        self.catalog = catalog or images.Catalog()
        self.lab_dir = lab_dir.resolve()
        self.rootfs = rootfs
        self.node_names = [f"lab-node-{i}" for i in range(1, nodes + 1)]
        self.log = log or logging.getLogger("lab.agent")
        self.workers: dict[str, PodWorker] = {}
        self.threads: dict[str, threading.Thread] = {}
        self.stores: dict[str, volumes.Store] = {"Secret": {}, "ConfigMap": {}}
        self.services: list[Obj] = []
        self.pods: list[Obj] = []
        self.dns: dns.ClusterDns | None = None  # bound in run(), on the bridge's address
        self.addresses = (str(a) for a in runtime.SUBNET.hosts() if a > ipaddress.ip_address("10.77.0.9"))
        self.passwd: dict[str, dict[str, tuple[int, int]]] = {}  # by root filesystem: user name -> (uid, gid)

    def dark(self, node: str) -> bool:
        """A lab fault: the node's kubelet gone dark while the file run/dark/<node> exists (a node cut off, its
        pods left Terminating when deleted, as slurm-bridge #49 saw); tests/cluster/plugin.py `dark_node`."""
        return (self.lab_dir / "run" / "dark" / node).exists()

    def users(self, rootfs: str) -> dict[str, tuple[int, int]]:
        if rootfs not in self.passwd:
            self.passwd[rootfs] = _passwd(Path(rootfs))
        return self.passwd[rootfs]

    def primary_gid(self, uid: int, rootfs: str) -> int:
        return next((gid for u, gid in self.users(rootfs).values() if u == uid), 0)

    def image_user(self, user: str, rootfs: str) -> tuple[int, int]:
        """The image's USER (`uid`, `uid:gid`, or names in its passwd and group files) as numbers; root when unset."""
        name, _, group = user.partition(":")
        if not name:
            return 0, 0
        uid = int(name) if name.isdigit() else self.users(rootfs)[name][0]
        if group:
            return uid, int(group) if group.isdigit() else _group_id(Path(rootfs), group)
        return uid, self.primary_gid(uid, rootfs)

    def service_address(self, namespace: str, name: str, port: int) -> tuple[str, int] | None:
        """Where a connection to a Service's port lands, as kube-proxy sends it: a ready endpoint's address at the
        port's targetPort (a name resolved in that pod's containers); None with no such port or no ready endpoint.
        For the lab's own host processes (the Metacontroller stand-in calls the hook server's Service)."""
        services, pods = self.services, self.pods  # one pass's lists, replaced whole
        svc = next(
            (s for s in services if (s["metadata"]["namespace"], s["metadata"]["name"]) == (namespace, name)), None
        )
        entry = next((p for p in (svc or {}).get("spec", {}).get("ports") or [] if p.get("port") == port), None)
        members = dns.endpoints(svc, pods) if svc and entry else []
        if not members:
            return None
        pod, target = members[0], entry.get("targetPort", port)
        if isinstance(target, str) and not target.isdigit():
            named = [p for c in pod["spec"]["containers"] for p in c.get("ports") or [] if p.get("name") == target]
            if not named:
                return None
            target = named[0]["containerPort"]
        return str(pod["status"]["podIP"]), int(target)

    def service_env(self) -> dict[str, str]:
        """What the kubelet sets in every container for the `kubernetes` Service (proxy.py relays it)."""
        host, port = str(runtime.GATEWAY), str(proxy.SERVICE_PORT)
        return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port, "KUBERNETES_SERVICE_PORT_HTTPS": port,
                "KUBERNETES_PORT": f"tcp://{host}:{port}", f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
                f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp", f"KUBERNETES_PORT_{port}_TCP_PORT": port,
                f"KUBERNETES_PORT_{port}_TCP_ADDR": host}  # fmt: skip

    def run(self, stop: threading.Event) -> None:
        runtime.ensure_bridge()
        self.dns = dns.ClusterDns(str(runtime.GATEWAY), log=self.log)
        threading.Thread(target=self.dns.serve, args=(stop,), name="dns", daemon=True).start()
        upstream = urlsplit(self.client.server)
        relay = proxy.ApiProxy(str(runtime.GATEWAY), (upstream.hostname or "127.0.0.1", upstream.port or 443), self.log)
        threading.Thread(target=relay.serve, args=(stop,), name="kubernetes-service", daemon=True).start()
        self.write_host_resolv_conf()
        self.ensure_nodes()
        while not stop.is_set():
            try:
                self.sync()
            except (kube.ApiError, requests.RequestException) as err:
                self.log.warning("agent pass failed: %s", err)
            stop.wait(0.5)
        for worker in self.workers.values():
            worker.stop.set()
        for thread in self.threads.values():
            thread.join(timeout=15)

    def ensure_nodes(self) -> None:
        for name in self.node_names:
            if self.client.get(kube.NODES, None, name) is None:
                node = self.client.create(kube.NODES, lab_node(name))
                self.client.update_status(kube.NODES, {**node, "status": lab_node(name)["status"]})

    def sync(self) -> None:
        self.pods = self.client.list(kube.PODS)
        self.services = self.client.list(kube.SERVICES)
        for kind, res in (("Secret", kube.SECRETS), ("ConfigMap", kube.CONFIGMAPS)):
            self.stores[kind] = {
                f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in self.client.list(res)
            }
        self.schedule()
        if self.dns is not None:
            self.dns.update(dns.cluster_records(self.services, self.pods, str(runtime.GATEWAY)))
        self.release_claims({(c["metadata"]["namespace"], c["metadata"]["name"]) for c in self.client.list(kube.PVCS)})
        seen = set()
        for pod in self.pods:
            if pod["spec"].get("nodeName") not in self.node_names:
                continue
            key = f"{pod_key(pod)}/{pod['metadata']['uid']}"
            seen.add(key)
            worker = self.workers.get(key)
            if worker is None:
                if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                self.start_worker(key, pod)
            else:
                worker.pod = pod
        for key in list(self.workers):
            if key not in seen:  # deleted with grace 0 by someone else: stop at once
                self.workers[key].stop.set()
                self.threads[key].join(timeout=15)
                self.cleanup(self.workers.pop(key))
                self.threads.pop(key)

    def start_worker(self, key: str, pod: Obj) -> None:
        short = pod["metadata"]["uid"].replace("-", "")[:10]
        worker = PodWorker(self, pod, next(self.addresses), self.lab_dir / "pods" / short)
        worker.dir.mkdir(parents=True, exist_ok=True)
        (worker.dir / "pod").write_text(f"{pod_key(pod)}\n")  # hack/cluster/exec.sh finds pods by this
        (worker.dir / "resolv.conf").write_text(dns.resolv_conf(pod["metadata"]["namespace"], str(runtime.GATEWAY)))
        default = (pod["metadata"].get("annotations") or {}).get(names.ANNOTATION_DEFAULT_CONTAINER)
        (worker.dir / "default-container").write_text(f"{default or pod['spec']['containers'][0]['name']}\n")
        self.workers[key] = worker
        self.threads[key] = threading.Thread(target=worker.run, name=f"pod {key}", daemon=True)
        self.threads[key].start()
        self.log.info("pod %s: admitted on %s at %s", pod_key(pod), pod["spec"]["nodeName"], worker.address)

    def schedule(self) -> None:
        nodes = [n for n in self.client.list(kube.NODES) if n["metadata"]["name"] in self.node_names]
        for pod in self.pods:
            spec = pod["spec"]
            if spec.get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
                continue
            for node in nodes:
                on_node = [p for p in self.pods if p["spec"].get("nodeName") == node["metadata"]["name"]]
                if node_fits(pod, node, on_node):
                    self.bind(pod, node["metadata"]["name"])
                    spec["nodeName"] = node["metadata"]["name"]
                    break

    def bind(self, pod: Obj, node: str) -> None:
        meta = pod["metadata"]
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"], "uid": meta["uid"]},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}  # fmt: skip
        try:
            self.client.request("POST", kube.PODS.path(meta["namespace"], meta["name"], "binding"), binding)
            self.log.info("pod %s: bound to %s", pod_key(pod), node)
        except kube.ApiError as err:
            self.log.info("pod %s: binding failed: %s", pod_key(pod), err)

    def write_hosts(self, worker: PodWorker) -> None:
        """Once, before the pod's containers start (it never changes: see hosts_file)."""
        path = worker.dir / "hosts"
        if not path.exists():
            path.write_text(hosts_file(worker.pod, worker.address))

    def release_claims(self, claims: set[tuple[str, str]]) -> None:
        """A deleted claim's directory goes with it, as a dynamically provisioned volume's (reclaim policy Delete)."""
        for path in self.lab_dir.glob("pvc/*/*"):
            if (path.parent.name, path.name) not in claims and not any(
                w.pod["metadata"]["namespace"] == path.parent.name and _claims(w.pod) & {path.name}
                for w in self.workers.values()
            ):
                shutil.rmtree(path, ignore_errors=True)
                self.log.info("claim %s/%s: deleted, its directory removed", path.parent.name, path.name)

    def write_host_resolv_conf(self) -> None:
        """The resolv.conf of the lab's own host processes (slurm_sync's replicas, hack/cluster/replica.sh): a
        pod's in the namespace the operator chart installs into, so they resolve Service names as its pods."""
        path = self.lab_dir / "resolv.conf"
        path.write_text(dns.resolv_conf(OPERATOR_NAMESPACE, str(runtime.GATEWAY)))

    def finish_deletion(self, worker: PodWorker) -> None:
        meta = worker.pod["metadata"]
        try:
            self.client.delete(kube.PODS, meta["namespace"], meta["name"], grace=0, uid=meta["uid"])
            self.log.info("pod %s: deleted", worker.key)
        except kube.ApiError as err:
            self.log.warning("pod %s: final delete failed: %s", worker.key, err)

    def cleanup(self, worker: PodWorker) -> None:
        shutil.rmtree(worker.dir, ignore_errors=True)


def _claims(pod: Obj) -> set[str]:
    return {
        v["persistentVolumeClaim"]["claimName"] for v in pod["spec"].get("volumes", []) if "persistentVolumeClaim" in v
    }


def _passwd(rootfs: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for line in (rootfs / "etc/passwd").read_text().splitlines():
        parts = line.split(":")
        if len(parts) > 3:
            out[parts[0]] = (int(parts[2]), int(parts[3]))
    return out


def _group_id(rootfs: Path, name: str) -> int:
    for line in (rootfs / "etc/group").read_text().splitlines():
        parts = line.split(":")
        if len(parts) > 2 and parts[0] == name:
            return int(parts[2])
    raise KeyError(f"no group {name!r} in the image")
