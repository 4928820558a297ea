"""`make image` (hack/image.sh): which engine builds, over which base, with which pip settings; and the image itself.

The first tests run the script against stand-in engines on a PATH of our own, so they hold whatever the machine has;
the stand-ins record the command lines the script runs. The last ones build the real image as `make test`'s image
part does (`hack/image.sh --ci`, cached by content) and run what it holds as a container runtime would: its own
command, working directory, user and environment, in a chroot of its root filesystem mounted read-only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hooks.app import create_app

ROOT = Path(__file__).resolve().parents[1]
# the commands hack/image.sh and hack/image-base.sh run besides the engines
TOOLS = ("bash", "dirname", "sed", "cat", "find", "sort", "xargs", "sha256sum", "cut", "head", "tail", "timeout", "grep", "mktemp", "rm")  # fmt: skip  # noqa: E501
DEFAULT_BASE = "docker.io/library/python:3.11-slim-bookworm"
RECIPE = hashlib.sha256((ROOT / "hack/image-base.sh").read_bytes()).hexdigest()[:12]
LOCAL_BASE = f"localhost/slinky-mc/python-base:3.11-bookworm-{RECIPE}"  # hack/image-base.sh's tag
STAND_IN = """#!/bin/bash
# A stand-in container engine: logs its arguments; `info`, `pull` and `build` exit as told; an image exists when it
# is named in the `images` file, and a build adds its tag there.
echo "{engine} $*" >> {tmp}/calls
case "$1" in
  info) exit {info} ;;
  pull) exit {pull} ;;
  build) [ {build} = 0 ] || {{ echo "STEP 8/15: RUN pip install"; echo "ERROR: no index"; exit {build}; }}
    while [ $# -gt 0 ]; do [ "$1" = -t ] && echo "$2" >> {tmp}/images; shift; done; exit 0 ;;
  inspect | image) grep -qxF -- "${{@: -1}}" {tmp}/images 2>/dev/null; exit ;;
esac
exit 0
"""


def _stand_in(engine: str, tmp_path: Path, *, info: int = 0, pull: int = 1, build: int = 0) -> str:
    return STAND_IN.format(engine=engine, tmp=tmp_path, info=info, pull=pull, build=build)


def _path_with(
    tmp_path: Path, engines: dict[str, int], *, pull: int = 1, build: int = 0, images: tuple[str, ...] = ()
) -> Path:
    """A PATH dir with the shell tools and stand-in engines that exit with the given code for `info` (docker's
    daemon check), with `pull` for a pull, `build` for a build and 0 for everything else; with runc beside them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    scripts = {
        engine: _stand_in(engine, tmp_path, info=code, pull=pull, build=build) for engine, code in engines.items()
    }
    for name, text in {**scripts, **({"runc": "#!/bin/bash\n"} if engines else {})}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "images").write_text("".join(f"{image}\n" for image in images))
    return bin_dir


def _env(bin_dir: Path, **extra: str) -> dict[str, str]:
    """Only our PATH, the test's own temporary directory, and no pip configuration file: the machine's pip settings
    are not the test's."""
    return {"PATH": str(bin_dir), "TMPDIR": str(bin_dir.parent), "PIP_CONFIG_FILE": os.devnull, **extra}


def _make_env(bin_dir: Path, **extra: str) -> dict[str, str]:
    """make's environment (its own variables), without the machine's pip settings."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")}, **_env(bin_dir, **extra)}


def _image(
    tmp_path: Path,
    engines: dict[str, int],
    *args: str,
    root: Path = ROOT,
    bin_dir: Path | None = None,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    bin_dir = bin_dir or _path_with(tmp_path, engines, images=(DEFAULT_BASE,))
    return subprocess.run(
        [str(root / "hack/image.sh"), *(args or ["reg.example/x:1"])],
        capture_output=True, text=True, env=_env(bin_dir, **env), cwd=root,
    )  # fmt: skip


def _calls(tmp_path: Path) -> list[str]:
    calls = tmp_path / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_no_engine_is_one_line_saying_what_to_install(tmp_path: Path) -> None:
    result = _image(tmp_path, {})
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "make image: no container engine can build here (docker not installed, podman not installed, buildah not "
        "installed); install podman or buildah (apt-get install podman) or start docker"
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="apt-get installs only as root")
def test_no_engine_on_a_root_host_with_apt_installs_buildah_and_runc(tmp_path: Path) -> None:
    bin_dir = _path_with(tmp_path, {}, images=(DEFAULT_BASE,))
    packages = tmp_path / "packages"  # what the stand-in apt-get installs: a stand-in buildah and runc
    packages.mkdir()
    (packages / "buildah").write_text(_stand_in("buildah", tmp_path))
    (packages / "runc").write_text("#!/bin/bash\n")
    (bin_dir / "apt-get").write_text(
        f'#!/bin/bash\necho "apt-get $*" >> {tmp_path}/calls\ncp -p {packages}/* {bin_dir}/\n'
    )
    for script in (packages / "buildah", packages / "runc", bin_dir / "apt-get"):
        script.chmod(0o755)
    for tool in ("cp", "chmod", "rm"):  # hack/lib/apt.sh keeps services from starting while apt-get runs
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(shutil.which(tool))
    result = _image(tmp_path, {}, bin_dir=bin_dir)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == ["make image: installing buildah runc with apt-get"]
    calls = _calls(tmp_path)
    assert calls[0].startswith("apt-get install -y -q --no-install-recommends ") and calls[0].endswith(" buildah runc")
    assert calls[-1].startswith("buildah build ")


def test_docker_without_a_daemon_falls_through_to_podman(tmp_path: Path) -> None:
    result = _image(tmp_path, {"docker": 1, "podman": 0})
    assert result.returncode == 0, result.stderr
    assert _calls(tmp_path) == [
        "docker info",
        f"podman image exists {DEFAULT_BASE}",
        f"podman build --runtime runc --build-arg BASE_IMAGE={DEFAULT_BASE} -t reg.example/x:1 -f Dockerfile .",
    ]
    assert "push it with: podman push reg.example/x:1" in result.stdout


def test_buildah_alone_builds_with_layers_over_the_base_it_has(tmp_path: Path) -> None:
    result = _image(tmp_path, {"buildah": 0})
    assert result.returncode == 0, result.stderr
    assert _calls(tmp_path) == [
        f"buildah inspect --type image {DEFAULT_BASE}",
        "buildah build --layers --pull=false --runtime runc "
        f"--build-arg BASE_IMAGE={DEFAULT_BASE} -t reg.example/x:1 -f Dockerfile .",
    ]


def test_the_default_base_is_pulled_when_the_engine_lacks_it(tmp_path: Path) -> None:
    bin_dir = _path_with(tmp_path, {"buildah": 0}, pull=0)
    result = _image(tmp_path, {}, bin_dir=bin_dir)
    assert result.returncode == 0, result.stderr
    assert _calls(tmp_path)[1] == f"buildah pull -q {DEFAULT_BASE}"
    assert f"--build-arg BASE_IMAGE={DEFAULT_BASE} " in _calls(tmp_path)[-1]


def test_with_no_registry_the_local_base_is_used_and_said_in_one_line(tmp_path: Path) -> None:
    """hack/image-base.sh's image, here already in the engine's storage (so it is not built again)."""
    bin_dir = _path_with(tmp_path, {"buildah": 0}, pull=1, images=(LOCAL_BASE,))
    result = _image(tmp_path, {}, bin_dir=bin_dir)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"make image: {DEFAULT_BASE} cannot be pulled here; using the local base {LOCAL_BASE} (hack/image-base.sh, "
        "from this host's Debian mirror)"
    ]
    assert _calls(tmp_path)[:3] == [
        f"buildah inspect --type image {DEFAULT_BASE}",
        f"buildah pull -q {DEFAULT_BASE}",
        f"buildah inspect --type image {LOCAL_BASE}",  # hack/image-base.sh: built once, then found
    ]
    assert f"--build-arg BASE_IMAGE={LOCAL_BASE} " in _calls(tmp_path)[-1]


def test_make_image_passes_the_charts_default_image(tmp_path: Path) -> None:
    bin_dir = _path_with(tmp_path, {"docker": 0}, images=(DEFAULT_BASE,))
    (bin_dir / "make").symlink_to(shutil.which("make"))
    env = _make_env(bin_dir)
    result = subprocess.run(
        ["make", "--no-print-directory", "image"], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    image = f"ghcr.io/slinky-metacontroller/slinky-metacontroller:{version}"  # tests/charts: the charts' default too
    assert _calls(tmp_path)[-1] == f"docker build --build-arg BASE_IMAGE={DEFAULT_BASE} -t {image} -f Dockerfile ."


def test_another_copy_of_the_base_image_can_be_named(tmp_path: Path) -> None:
    """With no Docker Hub in reach, `make image BASE_IMAGE=<mirror>/python:…` builds over a registry's copy."""
    bin_dir = _path_with(tmp_path, {"podman": 0})
    (bin_dir / "make").symlink_to(shutil.which("make"))
    env = _make_env(bin_dir, IMAGE_ENGINE="podman")
    base = "mirror.example/library/python:3.11-slim-bookworm"
    result = subprocess.run(
        ["make", "--no-print-directory", "image", f"BASE_IMAGE={base}", "IMAGE_TAG=1"],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    image = "ghcr.io/slinky-metacontroller/slinky-metacontroller:1"
    assert _calls(tmp_path) == [f"podman build --runtime runc --build-arg BASE_IMAGE={base} -t {image} -f Dockerfile ."]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"ARG BASE_IMAGE={DEFAULT_BASE}\nFROM ${{BASE_IMAGE}}\n" in dockerfile


def test_pip_in_the_build_gets_the_index_and_ca_bundle_this_machines_pip_names(tmp_path: Path) -> None:
    cert = tmp_path / "ca.pem"
    cert.write_text("a CA bundle\n")
    index = "https://index.example/simple"
    result = _image(tmp_path, {"buildah": 0}, PIP_INDEX_URL=index, PIP_CERT=str(cert))
    assert result.returncode == 0, result.stderr
    build = _calls(tmp_path)[-1]
    assert f" --build-arg PIP_INDEX_URL={index} " in build
    bundle = "/etc/ssl/certs/ca-certificates.crt"  # the base's, which the host's covers during the build only
    assert f" --build-arg PIP_CERT={bundle} -v {cert}:{bundle}:ro " in build
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "ARG PIP_INDEX_URL=\nARG PIP_TRUSTED_HOST=\nARG PIP_CERT=\n" in dockerfile  # empty: pip ignores them


def test_pip_settings_from_pip_config(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://index.example/simple\ntrusted-host = index.example\n")
    bin_dir = _path_with(tmp_path, {"buildah": 0}, images=(DEFAULT_BASE,))
    env = {"PATH": str(bin_dir), "PIP_CONFIG_FILE": str(conf)}
    result = subprocess.run([str(ROOT / "hack/image.sh"), "x:1"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    build = _calls(tmp_path)[-1]
    assert (
        " --build-arg PIP_INDEX_URL=https://index.example/simple --build-arg PIP_TRUSTED_HOST=index.example " in build
    )


def _copy_of_the_repository(tmp_path: Path) -> Path:
    """What hack/image.sh reads, copied, so a test can change it."""
    copy = tmp_path / "repo"
    for name in ("hack", "hooks", "slinky_common", "slurm_sync"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("Dockerfile", ".dockerignore", "requirements.lock"):
        shutil.copy(ROOT / name, copy / name)
    return copy


def test_ci_tags_by_content_and_builds_only_when_the_tag_is_missing(tmp_path: Path) -> None:
    repo = _copy_of_the_repository(tmp_path)
    bin_dir = _path_with(tmp_path, {"buildah": 0}, images=(DEFAULT_BASE,))

    def ci() -> tuple[str, list[str]]:
        before = len(_calls(tmp_path))
        result = _image(tmp_path, {}, "--ci", root=repo, bin_dir=bin_dir)
        assert result.returncode == 0, result.stderr
        return result.stdout, _calls(tmp_path)[before:]

    out, calls = ci()
    (image,) = out.splitlines()
    assert image.startswith("localhost/slinky-metacontroller:ci-") and len(image.rsplit("-", 1)[1]) == 12
    assert calls[-1].endswith(f" -t {image} -f Dockerfile .")
    assert ci() == (out, [f"buildah inspect --type image {DEFAULT_BASE}", f"buildah inspect --type image {image}"])
    (repo / "hooks" / "__pycache__").mkdir(exist_ok=True)
    (repo / "hooks" / "__pycache__" / "x.pyc").write_bytes(b"not in the build context")
    (repo / "README.md").write_text("not in the build context either\n")
    assert ci()[0] == out
    (repo / "hooks" / "app.py").write_text((repo / "hooks" / "app.py").read_text() + "# a change\n")
    out2, calls = ci()
    assert out2 != out and calls[-1].endswith(f" -t {out2.strip()} -f Dockerfile .")


def test_ci_build_that_fails_prints_the_end_of_its_log_and_fails(tmp_path: Path) -> None:
    bin_dir = _path_with(tmp_path, {"buildah": 0}, build=125, images=(DEFAULT_BASE,))
    result = _image(tmp_path, {}, "--ci", bin_dir=bin_dir)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0].startswith("make image: building localhost/slinky-metacontroller:ci-") and "(log: " in lines[0]
    assert lines[1:3] == ["STEP 8/15: RUN pip install", "ERROR: no index"]
    assert lines[3].startswith("make image: buildah could not build localhost/slinky-metacontroller:ci-")
    assert lines[3].endswith(lines[0].split("(log: ")[1][:-1]), lines  # where the whole log is


# ---------------------------------------------------------------- the real image

ENGINES = ("docker", "podman", "buildah")  # hack/image.sh's order
# Building the image takes minutes cold: these tests stay out of the fast loop (make unit) with the tests that start
# the real hook server, which the image's own command is.
REAL_IMAGE = pytest.mark.gunicorn
# Run as root in new mount and PID namespaces (unshare): mount the image's root read-only, with /tmp a tmpfs (the
# charts' emptyDir), /proc and the host's /dev; then chroot, change to the working directory, become the image's
# user and exec its command with its environment alone. argv: root uid gid workdir env-json command...
CHROOT = """
import json, os, subprocess, sys
root, uid, gid, workdir, env = sys.argv[1:6]
for mount in (["--bind", root, root], ["-o", "remount,bind,ro", root], ["-t", "tmpfs", "-o", "mode=1777", "tmpfs",
              root + "/tmp"], ["-t", "proc", "proc", root + "/proc"], ["--rbind", "/dev", root + "/dev"]):
    subprocess.run(["mount", *mount], check=True)
os.chroot(root)
os.chdir(workdir)
os.setgroups([])
os.setgid(int(gid))
os.setuid(int(uid))
os.execvpe(sys.argv[6], sys.argv[6:], json.loads(env))
"""


@dataclass(frozen=True)
class Image:
    name: str
    engine: str
    root: Path  # its root filesystem, mounted
    config: dict  # the image config's Cmd, Env, WorkingDir, User, ...

    def command(self, *argv: str, **env: str) -> list[str]:
        """The command line that runs argv (the image's own command when empty) as the image would run it."""
        uid, _, gid = self.config["User"].partition(":")
        image_env = dict(e.split("=", 1) for e in self.config.get("Env", []))
        return [
            "unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--",
            sys.executable, "-c", CHROOT, str(self.root), uid, gid or uid, self.config.get("WorkingDir") or "/",
            json.dumps({**image_env, **env}), *(argv or self.config["Cmd"]),
        ]  # fmt: skip


def _engine_with(name: str) -> str | None:
    for engine in ENGINES:
        if shutil.which(engine) and (
            engine != "docker" or subprocess.run(["docker", "info"], capture_output=True).returncode == 0
        ):
            found = subprocess.run(
                [engine, *(["inspect", "--type", "image"] if engine == "buildah" else ["image", "inspect"]), name],
                capture_output=True, text=True,
            )  # fmt: skip
            if found.returncode == 0:
                return engine
    return None


def _config(engine: str, name: str) -> dict:
    if engine == "buildah":
        out = subprocess.run(
            ["buildah", "inspect", "--type", "image", name], capture_output=True, text=True, check=True
        )
        return dict(json.loads(out.stdout)["OCIv1"]["config"])
    out = subprocess.run([engine, "image", "inspect", name], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout)[0]["Config"])


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Image]:
    """The image `make test`'s image part built (built now when it has not), its root filesystem mounted."""
    engines = [e for e in ENGINES if shutil.which(e)]
    if not engines and not (os.geteuid() == 0 and shutil.which("apt-get")):
        pytest.skip(
            "no container engine on this machine (docker, podman or buildah), and no apt-get as root to add one"
        )
    if os.geteuid() != 0:
        pytest.skip("running the image's root filesystem in a chroot needs root")
    built = subprocess.run(
        [str(ROOT / "hack/image.sh"), "--ci"], capture_output=True, text=True, cwd=ROOT, timeout=1800
    )
    assert built.returncode == 0, f"hack/image.sh --ci failed:\n{built.stderr[-4000:]}"
    name = built.stdout.strip().splitlines()[-1]
    engine = _engine_with(name)
    assert engine, f"hack/image.sh --ci printed {name}, which no engine here has"
    config = _config(engine, name)
    cleanup: list[list[str]] = []
    try:
        if engine == "docker":
            container = subprocess.run(
                ["docker", "create", name], capture_output=True, text=True, check=True
            ).stdout.strip()
            cleanup.append(["docker", "rm", container])
            root = tmp_path_factory.mktemp("image-root")
            export = subprocess.Popen(["docker", "export", container], stdout=subprocess.PIPE)
            subprocess.run(["tar", "-x", "-C", str(root)], stdin=export.stdout, check=True)
            assert export.wait() == 0
        else:
            create = (
                ["buildah", "from", "--pull=false", "--quiet", name]
                if engine == "buildah"
                else ["podman", "create", name]
            )
            container = subprocess.run(create, capture_output=True, text=True, check=True).stdout.strip()
            cleanup.append([engine, "rm", container])
            mounted = subprocess.run([engine, "mount", container], capture_output=True, text=True, check=True)
            cleanup.insert(0, [engine, "umount", container])
            root = Path(mounted.stdout.strip())
        yield Image(name, engine, root, config)
    finally:
        for command in cleanup:
            subprocess.run(command, capture_output=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, {"body": error.read().decode(errors="replace")}


def _stop(proc: subprocess.Popen[bytes]) -> str:
    """Stop the whole process group (unshare, then the image's command as its PID namespace's init); its output."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
    out = proc.stdout.read() if proc.stdout else b""
    return out.decode(errors="replace")[-4000:]


@REAL_IMAGE
def test_the_image_is_what_the_charts_run(image: Image) -> None:
    assert image.config["User"] == "65532:65532"  # podSecurityContext.runAsUser in every chart
    assert image.config["Cmd"] == ["gunicorn", "-c", "hooks/gunicorn_conf.py", "hooks.app:create_app()"]
    assert image.config["WorkingDir"] == "/app"


@REAL_IMAGE
def test_the_images_own_command_serves_the_hooks_on_a_read_only_root(image: Image) -> None:
    """Its configured command, user, working directory and environment, HOOKS_BIND on a free loopback port: a
    NodeSet sync (examples/requests/nodeset-sync.json) gets the answer the in-process app gives."""
    port = _free_port()
    proc = subprocess.Popen(
        image.command(HOOKS_BIND=f"127.0.0.1:{port}"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    body = (ROOT / "examples" / "requests" / "nodeset-sync.json").read_bytes()
    try:
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        assert proc.poll() is None, f"the image's command exited {proc.returncode}:\n{_stop(proc)}"
        status, answer = _post(f"http://127.0.0.1:{port}/nodeset/sync", body)
    finally:
        printed = _stop(proc)
    expected = create_app().test_client().post("/nodeset/sync", data=body, content_type="application/json")
    assert expected.status_code == 200
    assert status == 200, printed
    assert answer == expected.get_json()


@REAL_IMAGE
def test_slurm_sync_help_runs_from_the_image(image: Image) -> None:
    done = subprocess.run(
        image.command("python", "-m", "slurm_sync", "--help"), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "usage:" in done.stdout


@REAL_IMAGE
def test_nothing_in_the_image_can_write_outside_tmp(image: Image) -> None:
    """The root is mounted read-only and the image's user runs there: /app and / refuse a write, /tmp takes one."""
    probe = (
        "import pathlib, sys\n"
        "for p in sys.argv[1:]:\n"
        "    try:\n        pathlib.Path(p).write_text('x'); print(p, 'ok')\n"
        "    except OSError as e:\n        print(p, e.strerror)\n"
    )
    done = subprocess.run(
        image.command("python", "-c", probe, "/app/x", "/x", "/tmp/x"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["/app/x Read-only file system", "/x Read-only file system", "/tmp/x ok"]
