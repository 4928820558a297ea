"""The bridge settings read from the DecoratorController's annotations (hooks/bridge/settings.py): each
annotation, and Slinky's Helm default when it is absent or, except for the MCS label, empty."""

from __future__ import annotations

import pytest

from hooks.bridge.settings import DEFAULT_MCS_LABEL, DEFAULT_PARTITION, BridgeSettings, from_controller
from slinky_common import names
from slinky_common.jsontypes import JSON


def controller(**annotations: str) -> JSON:
    return {"metadata": {"name": "bridge-pods", "annotations": annotations}}


def test_slinkys_defaults() -> None:
    assert BridgeSettings() == BridgeSettings("slurm-bridge", "kubernetes", names.BRIDGE_SCHEDULER_NAME)
    assert (DEFAULT_PARTITION, DEFAULT_MCS_LABEL) == ("slurm-bridge", "kubernetes")


@pytest.mark.parametrize(
    "given",
    [
        pytest.param({}, id="no-metadata"),
        pytest.param({"metadata": None}, id="null-metadata"),
        pytest.param({"metadata": {}}, id="no-annotations"),
        pytest.param({"metadata": {"annotations": None}}, id="null-annotations"),
        pytest.param(controller(**{"other/annotation": "x"}), id="unrelated-annotations"),
    ],
)
def test_absent_settings_are_slinkys_defaults(given: JSON) -> None:
    assert from_controller(given) == BridgeSettings()


def test_each_annotation_sets_its_setting() -> None:
    settings = from_controller(
        controller(
            **{
                names.ANNOTATION_SETTING_PARTITION: "gpu",
                names.ANNOTATION_SETTING_MCS_LABEL: "k8s",
                names.ANNOTATION_SETTING_SCHEDULER_NAME: "my-scheduler",
            }
        )
    )
    assert settings == BridgeSettings(partition="gpu", mcs_label="k8s", scheduler_name="my-scheduler")


def test_an_empty_mcs_label_means_none_but_an_empty_partition_or_scheduler_name_the_default() -> None:
    settings = from_controller(
        controller(
            **{
                names.ANNOTATION_SETTING_PARTITION: "",
                names.ANNOTATION_SETTING_MCS_LABEL: "",
                names.ANNOTATION_SETTING_SCHEDULER_NAME: "",
            }
        )
    )
    assert settings == BridgeSettings(
        partition="slurm-bridge", mcs_label="", scheduler_name=names.BRIDGE_SCHEDULER_NAME
    )
