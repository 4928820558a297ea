"""The power report both halves share (slinky_common/powerreport.py): slurm_sync writes it, the NodeSet hook reads
it; what cannot be read is no report."""

from __future__ import annotations

import json

import pytest

from slinky_common import slurmstate
from slinky_common.powerreport import PowerReport, read_report


def test_the_report_is_compact_json_in_a_stable_order_and_reads_back() -> None:
    report = PowerReport(("a",), ("b", "c"), ("d",))
    value = report.value()
    assert value == '{"up":["a"],"down":["b","c"],"resumeFailed":["d"]}'
    assert json.loads(value) == {"up": ["a"], "down": ["b", "c"], "resumeFailed": ["d"]}
    assert read_report(value) == report


def test_each_node_has_one_power_and_up_wins_a_contradiction() -> None:
    """A node in two lists (a hand-edited annotation) is taken as up: the hook then keeps or creates its pod."""
    report = PowerReport(up=("a", "b"), down=("b", "c"), resume_failed=("c", "d"))
    assert report.power_of() == {
        "a": slurmstate.POWER_UP,
        "b": slurmstate.POWER_UP,
        "c": slurmstate.POWER_DOWN,
        "d": slurmstate.RESUME_FAILED,
    }


def test_up_since_is_written_only_when_there_is_one_and_reads_back() -> None:
    report = PowerReport(up=("a",), up_since=(("a", 1_795_771_000), ("b", 1_795_771_001)))
    value = report.value()
    assert value == '{"up":["a"],"down":[],"resumeFailed":[],"upSince":{"a":1795771000,"b":1795771001}}'
    assert read_report(value) == report and report.since() == {"a": 1_795_771_000, "b": 1_795_771_001}


def test_a_report_may_omit_a_list() -> None:
    assert read_report('{"up":["a"]}') == PowerReport(up=("a",))


@pytest.mark.parametrize(
    "value",
    [
        *(None, "", "not json", "[]", '{"up":"a"}', '{"up":[1]}', '{"up":[],"sideways":[]}', '{"down":null}'),
        *('{"upSince":[]}', '{"upSince":{"a":"1"}}', '{"upSince":{"a":true}}', '{"upSince":{"a":-1}}'),
    ],
)
def test_what_cannot_be_read_is_no_report(value: str | None) -> None:
    assert read_report(value) is None
