"""Parsing a workload's `slurmjob.slinky.slurm.net/*` annotations (hooks/bridge/annotations.py): strings verbatim,
int32s and quantities with slurm-bridge's rules, `exclusive`, and every bad value named in one error."""

from __future__ import annotations

import pytest

from hooks.bridge import annotations as job_annotations
from hooks.bridge.annotations import BadAnnotations, JobAnnotations
from slinky_common import names
from tests.hooks.bridge.builders import slurmjob

WHERE = "Job ns/j"


def test_key_is_the_slurmjob_prefix_plus_the_name() -> None:
    assert job_annotations.key("cpu-per-task") == "slurmjob.slinky.slurm.net/cpu-per-task"
    assert job_annotations.key("account") == names.SLURMJOB_PREFIX + "account"


def test_no_annotations_give_nothing_set_and_an_exclusive_job() -> None:
    assert job_annotations.parse({}, WHERE) == JobAnnotations(strings={}, ints={})
    assert job_annotations.parse({}, WHERE).exclusive is True


def test_every_string_key_passes_verbatim_and_others_are_ignored() -> None:
    given = {name: f" value of {name} " for name in job_annotations.STRING_KEYS}
    parsed = job_annotations.parse(
        {
            **slurmjob(**{k.replace("-", "_"): v for k, v in given.items()}),
            names.SLURMJOB_PREFIX + "unknown": "x",  # unknown keys under the prefix: ignored, as slurm-bridge does
            "account": "not-prefixed",
        },
        WHERE,
    )
    assert parsed.strings == given
    assert parsed.ints == {} and (parsed.cpus_per_task, parsed.memory_mib) == (None, None)


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("0", 0),
        ("42", 42),
        ("+5", 5),
        ("-3", -3),
        ("007", 7),
        ("2147483647", 2**31 - 1),
        ("-2147483648", -(2**31)),
    ],
)
@pytest.mark.parametrize("name", job_annotations.INT_KEYS)
def test_int_keys_are_base_10_int32(name: str, text: str, number: int) -> None:
    assert job_annotations.parse({job_annotations.key(name): text}, WHERE).ints == {name: number}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("2147483648", "out of the int32 range"),
        ("-2147483649", "out of the int32 range"),
        ("", "not a base-10 integer"),
        ("1.0", "not a base-10 integer"),
        ("1e3", "not a base-10 integer"),
        ("0x10", "not a base-10 integer"),
        ("1_000", "not a base-10 integer"),  # Python's int() takes it; strconv.ParseInt does not
        ("5\n", "not a base-10 integer"),
        (" 5", "not a base-10 integer"),
        ("\u0663", "not a base-10 integer"),  # ARABIC-INDIC DIGIT THREE: int() takes it, Go does not
    ],
)
def test_a_bad_int_names_key_value_and_reason(text: str, reason: str) -> None:
    with pytest.raises(BadAnnotations) as caught:
        job_annotations.parse({job_annotations.key("priority"): text}, WHERE)
    assert str(caught.value) == f"invalid annotations on {WHERE}: {names.SLURMJOB_PREFIX}priority={text!r}: {reason}"


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("200m", 1), ("1", 1), ("1500m", 2), ("2", 2), ("0", 0), ("65533", 65533)],
)
def test_cpu_per_task_is_a_quantity_rounded_up(text: str, cpus: int) -> None:
    assert job_annotations.parse(slurmjob(cpu_per_task=text), WHERE).cpus_per_task == cpus


@pytest.mark.parametrize(
    ("text", "mib"),
    [("1Gi", 1024), ("1Mi", 1), ("1500Ki", 1), ("1M", 0), ("2G", 1907), ("1Ti", 2**20)],
)
def test_mem_per_node_is_whole_mebibytes_rounded_down(text: str, mib: int) -> None:
    assert job_annotations.parse(slurmjob(mem_per_node=text), WHERE).memory_mib == mib


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("cpu-per-task", "two", "'two' is not a Kubernetes quantity"),
        ("cpu-per-task", "65534", "65534 CPUs is more than Slurm can hold (at most 65533)"),
        ("mem-per-node", "1 Gi", "'1 Gi' is not a Kubernetes quantity"),
        ("mem-per-node", "1e31", "'1e31' is larger than any amount Slurm can hold"),
        ("cpu-per-task", "-1", "-1 CPUs is negative; Slurm holds 0 to 65533"),
        ("mem-per-node", "-1Gi", "-1024 MiB is negative; Slurm holds 0 to 9223372036854775807"),
    ],
)
def test_a_bad_quantity_names_key_value_and_reason(name: str, text: str, needle: str) -> None:
    with pytest.raises(BadAnnotations) as caught:
        job_annotations.parse({job_annotations.key(name): text}, WHERE)
    assert str(caught.value) == f"invalid annotations on {WHERE}: {job_annotations.key(name)}={text!r}: {needle}"


@pytest.mark.parametrize(
    ("value", "exclusive"),
    [
        ("false", False),
        ("False", False),
        ("\tFALSE\n", False),
        ("true", True),
        ("", True),
        ("0", True),
        ("falsey", True),
        ("f alse", True),
    ],
)
def test_exclusive_is_false_only_for_false(value: str, exclusive: bool) -> None:
    assert job_annotations.parse(slurmjob(exclusive=value), WHERE).exclusive is exclusive


def test_every_bad_value_is_reported_at_once_sorted_and_good_ones_do_not_hide_them() -> None:
    given = slurmjob(
        timelimit="x", max_nodes="99999999999", cpu_per_task="lots", mem_per_node="-", min_nodes="2", account="a"
    )
    with pytest.raises(BadAnnotations) as caught:
        job_annotations.parse(given, WHERE)
    p = names.SLURMJOB_PREFIX
    assert str(caught.value) == (
        f"invalid annotations on {WHERE}: "
        f"{p}cpu-per-task='lots': 'lots' is not a Kubernetes quantity; "
        f"{p}max-nodes='99999999999': out of the int32 range; "
        f"{p}mem-per-node='-': '-' is not a Kubernetes quantity; "
        f"{p}timelimit='x': not a base-10 integer"
    )
    assert isinstance(caught.value, ValueError)


def test_a_full_set_parses_into_each_field() -> None:
    parsed = job_annotations.parse(
        slurmjob(
            account="acct",
            partition="debug",
            min_nodes="2",
            max_nodes="4",
            priority="-1",
            timelimit="90",
            cpu_per_task="3",
            mem_per_node="2Gi",
            exclusive="false",
        ),
        WHERE,
    )
    assert parsed == JobAnnotations(
        strings={"account": "acct", "partition": "debug"},
        ints={"max-nodes": 4, "min-nodes": 2, "priority": -1, "timelimit": 90},
        cpus_per_task=3,
        memory_mib=2048,
        exclusive=False,
    )
