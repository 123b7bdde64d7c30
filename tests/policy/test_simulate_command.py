"""`manage.py simulate` prints one JSON object with the contract's keys (no database needed)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"


@pytest.mark.parametrize("policy", ["fair", "fifo"])
def test_simulate_prints_the_metrics_as_one_json_object(policy: str) -> None:
    out = StringIO()
    call_command("simulate", trace=str(EXAMPLES / "small.csv"), config=str(EXAMPLES / "sim.yaml"),
                 policy=policy, stdout=out)
    result = json.loads(out.getvalue())
    assert result["jobs"] == 500 and result["quota_violations"] == 0
    assert set(result) == {"jobs", "makespan_s", "utilization", "wait_s", "jct_s", "teams",
                           "jain_index", "preemptions", "preemptions_by_cause",
                           "jain_index_backlogged", "backlogged_s", "quota_violations",
                           "unplaceable", "wall_s"}
    assert set(result["preemptions_by_cause"]) == {"priority", "reclaim", "fair_share", "idle"}
    assert result["preemptions"] == sum(result["preemptions_by_cause"].values())
    assert 0 < result["jain_index_backlogged"] <= 1


def test_simulate_says_which_trace_line_is_wrong(tmp_path: Path) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text("submit_s,team,gpus,duration_s\n0,a,two,10\n")
    with pytest.raises(CommandError, match=r"bad.csv:2: gpus must be a whole number"):
        call_command("simulate", trace=str(trace), config=str(EXAMPLES / "sim.yaml"))


def test_simulate_refuses_a_config_without_a_simulated_fleet(tmp_path: Path) -> None:
    config = tmp_path / "empty.yaml"
    config.write_text("teams:\n  - {name: a}\n")
    with pytest.raises(CommandError, match="no `simulated` source"):
        call_command("simulate", trace=str(EXAMPLES / "small.csv"), config=str(config))
