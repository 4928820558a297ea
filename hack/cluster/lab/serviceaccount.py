"""A pod's ServiceAccount credentials, as the kubelet projects them (the `kube-api-access-*` volume).

The token is the pod's own: a TokenRequest bound to the pod (so it dies with it), 3607 s as the kubelet
asks, fetched again at 80 % of its life; beside it the API server's CA and the pod's namespace, at
/var/run/secrets/kubernetes.io/serviceaccount, where every in-cluster client looks. A pod or
ServiceAccount that sets automountServiceAccountToken: false gets none.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from lab import kube

Obj = dict[str, Any]
MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
EXPIRATION = 3607  # seconds: the kubelet's request
REFRESH_AT = 0.8  # of the token's life, as the kubelet's token manager


def automount(pod: Obj, account: Obj | None) -> bool:
    """The pod's own setting, else its ServiceAccount's, else true (Kubernetes' default)."""
    for source in (pod["spec"], account or {}):
        if source.get("automountServiceAccountToken") is not None:
            return bool(source["automountServiceAccountToken"])
    return True


def account_name(pod: Obj) -> str:
    return str(pod["spec"].get("serviceAccountName") or pod["spec"].get("serviceAccount") or "default")


@dataclass
class Credentials:
    """The files of one pod's credentials volume, and when to fetch its token again."""

    files: dict[str, tuple[bytes, int | None]]
    renew_at: float


def request_token(client: kube.Client, pod: Obj) -> Credentials:
    """A token bound to the pod (kube.ApiError when the API server refuses)."""
    meta = pod["metadata"]
    bound = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": EXPIRATION, "boundObjectRef": bound}}  # fmt: skip
    answer = client.request("POST", kube.SERVICEACCOUNTS.path(meta["namespace"], account_name(pod), "token"), body)
    files = {"token": (answer["status"]["token"].encode(), None), "ca.crt": (client.ca_pem, None),
             "namespace": (meta["namespace"].encode(), None)}  # fmt: skip
    return Credentials(files, time.time() + EXPIRATION * REFRESH_AT)
