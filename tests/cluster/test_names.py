"""Names on the cluster lab resolve in a pod as on a cluster: through the lab's DNS, never missing while the
Services around them change (hack/cluster/lab/dns.py).

CI at 6707150 lost a lifecycle run (seed 652146, step 41) to a lookup that found no name: slurmdbd's
"Unknown server host 'mariadb'", while the node agent rewrote every pod's hosts file in place.
"""

from __future__ import annotations

import threading

import pytest

from tests.cluster.plugin import NAMESPACE, ClusterLab

pytestmark = pytest.mark.cluster
SECONDS = 30
# slurmdbd's pod, the one that lost the name; it is not rolled when NodeSets change, as the controller's pod
# is (a lookup loop there was killed with its container after the lifecycle tests deleted their NodeSet).
ACCOUNTING_POD = "slurm-accounting-0"
# As slurmdbd looks its database up: the short name, through the search list of the pod's resolv.conf.
LOOKUPS = (
    f'n=0; miss=0; end=$(( $(date +%s) + {SECONDS} )); while [ "$(date +%s)" -lt "$end" ]; do '
    'n=$((n + 1)); getent hosts mariadb >/dev/null || miss=$((miss + 1)); done; echo "$n $miss"'
)


def test_a_service_name_resolves_in_a_pod_on_every_lookup_while_services_churn(cluster_lab: ClusterLab) -> None:
    result: dict[str, str] = {}

    def look_up() -> None:
        result["out"] = cluster_lab.exec(ACCOUNTING_POD, ["sh", "-c", LOOKUPS], timeout=SECONDS + 60).stdout

    looker = threading.Thread(target=look_up)
    looker.start()
    churned = 0
    try:
        while looker.is_alive():
            name = f"churn-{churned % 4}"
            cluster_lab.kubectl("create", "service", "clusterip", name, "-n", NAMESPACE, "--tcp=5678:8080")
            cluster_lab.kubectl("delete", "service", name, "-n", NAMESPACE, "--wait=false")
            churned += 1
    finally:
        looker.join(timeout=SECONDS + 90)
    assert "out" in result, "the lookups did not finish (their exec failed: see the thread's error above)"
    lookups, misses = (int(word) for word in result["out"].split())
    assert churned >= 5 and lookups >= 100, f"too little churn to tell: {churned} Services, {lookups} lookups"
    assert misses == 0, f"{misses} of {lookups} lookups of 'mariadb' found no name while {churned} Services churned"
