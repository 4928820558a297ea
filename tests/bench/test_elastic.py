"""The elastic suite's arithmetic (bench/elastic.py): slurmctld's log stamps, the three intervals, the budget on
ours. The trials themselves need the cluster lab and run in `make bench`."""

from __future__ import annotations

import datetime

from bench import elastic
from bench.elastic import Trial


def test_a_slurmctld_stamp_is_the_hosts_local_time_with_milliseconds() -> None:
    stamp = "2026-11-27T05:34:45.004"
    expected = datetime.datetime.fromisoformat(stamp).astimezone().timestamp()
    assert elastic._epoch(stamp) == expected
    assert round(elastic._epoch(stamp) % 1, 3) == 0.004


def test_the_budget_is_on_the_reaction_and_slurms_part_is_beside_it() -> None:
    trials = [Trial(submitted=0.0, allocated=3.0, woken=4.0, pod=4.5 + i / 10) for i in range(20)]
    report = elastic._report(trials)
    (budget,) = report.budgets
    assert budget.limit == elastic.BUDGET_P95 and budget.ok
    assert round(budget.value, 3) == round(0.5 + 0.95 * 19 / 10, 3)
    scheduler, power_saving, slurm, ours, total = report.rows
    assert scheduler[1:4] == ["20", "3.00 s", "3.00 s"] and power_saving[2] == "1.00 s" and slurm[2] == "4.00 s"
    assert ours[4] == "2.40 s" and total[2].startswith("5.")
    backfilled = elastic._report([Trial(0.0, None, 4.0, 5.0), Trial(0.0, 3.0, 4.0, 5.0)])
    assert backfilled.rows[0][1] == "1" and backfilled.rows[3][1] == "2"
    slow = [Trial(0.0, 1.0, 1.0, 5.0)] * 20
    assert not elastic._report(slow).budgets[0].ok
