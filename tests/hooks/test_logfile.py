"""The logfile sidecar (hooks/logfile.py): a native sidecar copying a daemon's log FIFO to its output, which a
user's `logfile` override may change but not rename. (tests/hooks/test_init_scripts.py runs its script.)"""

from __future__ import annotations

from hooks.logfile import LOG_DIR, LOGFILE_IMAGE, LOGFILE_SCRIPT, logfile_sidecar
from tests.support.kube import validate_builtin


def test_a_native_sidecar_reading_the_daemons_fifo() -> None:
    sidecar = logfile_sidecar(f"{LOG_DIR}/slurmd.log", None)
    assert (sidecar["name"], sidecar["image"], sidecar["restartPolicy"]) == ("logfile", LOGFILE_IMAGE, "Always")
    assert sidecar["command"] == ["sh", "-c", LOGFILE_SCRIPT]
    assert sidecar["env"] == [{"name": "SOCKET", "value": f"{LOG_DIR}/slurmd.log"}]
    assert sidecar["volumeMounts"] == [{"name": "slurm-logfile", "mountPath": LOG_DIR}]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "initContainers": [sidecar],
            "containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "slurm-logfile", "emptyDir": {}}],
        },
    }
    assert validate_builtin(pod) == []


def test_an_override_changes_the_image_and_resources_but_keeps_the_name() -> None:
    override = {"name": "mine", "image": "busybox:1", "resources": {"limits": {"memory": "32Mi"}}}
    sidecar = logfile_sidecar(f"{LOG_DIR}/slurmctld.log", override)
    assert (sidecar["name"], sidecar["image"]) == ("logfile", "busybox:1")
    assert sidecar["resources"] == {"limits": {"memory": "32Mi"}}
    assert sidecar["env"] == [{"name": "SOCKET", "value": f"{LOG_DIR}/slurmctld.log"}]
