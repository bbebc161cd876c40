"""Learning runs: each scheduler must solve CartPole-v1 (eval mean >= 475) on a fixed seed."""

from __future__ import annotations

import pytest

import hybrid
from hybrid import TrainConfig

THRESHOLD = 475.0


@pytest.mark.slow
@pytest.mark.parametrize(
    "changes",
    [
        {"scheduler": "sync"},
        {"scheduler": "async"},
        {"scheduler": "bounded", "staleness_bound": 4, "cluster": "stragglers"},
    ],
    ids=["sync", "async", "bounded-s4-stragglers"],
)
def test_solves_cartpole_within_200k_steps(changes, tmp_path):
    cfg = TrainConfig(total_env_steps=200_000, seed=0, progress=False, out=str(tmp_path / "run"))
    result = hybrid.train(cfg.replace(**changes))
    summary = result.summary
    evals = result.metrics("eval")
    assert evals, "no evaluation was logged"
    # The stop decision and the summary come from the same evaluation rows.
    assert max(row["eval/return_mean"] for row in evals) >= THRESHOLD
    assert summary["solved"] is True
    assert summary["env_steps_to_solve"] <= 200_000
    assert summary["final_eval_return"] >= THRESHOLD
