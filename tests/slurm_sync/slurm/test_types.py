"""slurmrestd's JSON read into our types (slurm_sync/slurm/types.py): every field type checked, an answer of
the wrong shape refused as malformed (an unavailable Slurm, never a guess), Slurm's no-value numbers read."""

from __future__ import annotations

import pytest

from slurm_sync.slurm.errors import SlurmMalformed, SlurmUnavailable
from slurm_sync.slurm.types import no_val_number, parse_job, parse_node


def test_a_node_with_its_states_normalised_and_absent_fields_empty() -> None:
    assert (
        parse_node({"name": "n1", "state": "IDLE,DRAIN"}).state
        == parse_node({"name": "n1", "state": ["IDLE", "DRAIN"]}).state
    )
    node = parse_node({"name": "n1", "state": ["idle", "DRAIN"], "cpus": 8, "features": ["a", "b"]})
    assert (node.name, node.cpus, node.features, node.reason, node.real_memory) == ("n1", 8, ("a", "b"), "", None)
    assert "DRAIN" in node.state and "IDLE" in node.state


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        ({"state": ["IDLE"]}, "name"),
        ({"name": "n1"}, "state"),
        ({"name": "n1", "state": {"IDLE": True}}, "state"),  # a list, or one CSV string from older parsers
        ({"name": "n1", "state": ["IDLE"], "cpus": "8"}, "cpus"),
        ({"name": "n1", "state": ["IDLE"], "features": [1]}, "features"),
    ],
)
def test_a_node_of_the_wrong_shape_is_malformed_and_names_the_field(obj: dict, needle: str) -> None:
    with pytest.raises(SlurmMalformed, match=needle):
        parse_node(obj)
    assert issubclass(SlurmMalformed, SlurmUnavailable)  # a wrong answer means Slurm's state is unknown


def test_no_value_numbers_are_none_when_unset_or_infinite() -> None:
    assert no_val_number({"t": {"set": True, "infinite": False, "number": 60}}, "t", "job") == 60
    assert no_val_number({"t": {"set": False, "infinite": False, "number": 0}}, "t", "job") is None
    assert no_val_number({"t": {"set": True, "infinite": True, "number": 0}}, "t", "job") is None
    assert no_val_number({"t": 5}, "t", "job") == 5 and no_val_number({}, "t", "job") is None
    with pytest.raises(SlurmMalformed, match="number"):
        no_val_number({"t": {"set": True, "number": "60"}}, "t", "job")


def test_a_job_reads_its_states_nodes_and_times() -> None:
    job = parse_job(
        {
            "job_id": 7,
            "job_state": ["RUNNING"],
            "nodes": "n[1-2]",
            "end_time": {"set": True, "infinite": False, "number": 1_800_000_000},
            "time_limit": {"set": True, "infinite": True, "number": 0},
        }
    )
    assert (job.job_id, job.state, job.nodes, job.end_time, job.time_limit_minutes) == (
        7,
        frozenset({"RUNNING"}),
        "n[1-2]",
        1_800_000_000,
        None,
    )
    with pytest.raises(SlurmMalformed, match="job_state"):
        parse_job({"job_id": 7})
