"""The slurm.key and jwt.key Secrets of charts/slurm, rendered by real helm: with `create: true` the chart
makes each Secret under the name the Controller and Accounting point at, a custom `secretRef.name`
included, as Slinky's helm/slurm does (issue 27, item 5); with `create: false` it makes none and the CRs
point at the user's Secret."""

from __future__ import annotations

import base64

import pytest

from tests.charts.rendered import Obj, render
from tests.charts.validation import validate

KEYS = (
    ("slurmKey", "slurmKeyRef", "slurm-auth-slurm", "slurm.key"),
    ("jwtKey", "jwtKeyRef", "slurm-auth-jwt", "jwt.key"),
)


def secrets(docs: dict[str, Obj]) -> dict[str, Obj]:
    return {key.split("/", 1)[1]: doc for key, doc in docs.items() if key.startswith("Secret/")}


def refs(docs: dict[str, Obj], ref: str) -> list[Obj]:
    """The key reference `ref` of the Controller and of the Accounting."""
    return [docs[f"{kind}/slurm"]["spec"][ref] for kind in ("Controller", "Accounting")]


@pytest.mark.parametrize(("value", "ref", "default_name", "default_key"), KEYS)
def test_create_makes_the_secret_under_a_custom_name_the_crs_point_at(
    value: str, ref: str, default_name: str, default_key: str
) -> None:
    docs = render({"accounting": {"enabled": True}, value: {"create": True, "secretRef": {"name": "site-key"}}})
    made = secrets(docs)
    assert "site-key" in made and default_name not in made
    secret = made["site-key"]
    assert secret["metadata"]["namespace"] == "slurm" and secret["immutable"] is True
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert list(secret["data"]) == [default_key] and base64.b64decode(secret["data"][default_key])
    assert refs(docs, ref) == [{"name": "site-key", "key": default_key}] * 2
    assert validate(secret) == []


@pytest.mark.parametrize(("value", "ref", "default_name", "default_key"), KEYS)
def test_create_honours_a_custom_key_and_annotations(value: str, ref: str, default_name: str, default_key: str) -> None:
    custom = {"create": True, "annotations": {"team": "hpc"}, "secretRef": {"name": "site-key", "key": "k"}}
    docs = render({value: custom})
    secret = secrets(docs)["site-key"]
    assert list(secret["data"]) == ["k"] and secret["metadata"]["annotations"]["team"] == "hpc"
    assert docs["Controller/slurm"]["spec"][ref] == {"name": "site-key", "key": "k"}


@pytest.mark.parametrize(("value", "ref", "default_name", "default_key"), KEYS)
def test_without_create_the_crs_point_at_the_users_secret_and_none_is_made(
    value: str, ref: str, default_name: str, default_key: str
) -> None:
    docs = render({value: {"create": False, "secretRef": {"name": "site-key"}}})
    made = secrets(docs)
    assert "site-key" not in made and default_name not in made
    assert docs["Controller/slurm"]["spec"][ref] == {"name": "site-key", "key": default_key}


@pytest.mark.parametrize(("value", "ref", "default_name", "default_key"), KEYS)
def test_defaults_unchanged(value: str, ref: str, default_name: str, default_key: str) -> None:
    docs = render({})
    assert default_name in secrets(docs)
    assert docs["Controller/slurm"]["spec"][ref] == {"name": default_name, "key": default_key}


def test_no_key_secret_for_an_external_controller_even_with_a_custom_name() -> None:
    custom = {"create": True, "secretRef": {"name": "site-key"}}
    docs = render({"controller": {"external": True}, "slurmKey": custom, "jwtKey": custom})
    assert "site-key" not in secrets(docs)
