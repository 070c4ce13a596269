"""A script that trains with hf_lightning.Trainer on 2 CPU processes (gloo) ends with its process group closed.

Lightning opens the group for the fit and leaves it open; a gloo group still alive when the interpreter
ends can abort a process whose work is done ("terminate called without an active exception", exit code
134). The test launches this file as 2 processes, without the test launcher's own closing. Each process
registers, before training, an exit handler that records whether the group is still open when it runs
(exit handlers run last-registered first, so it runs after any handler the Trainer registers).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path

import pytest
import torch

from tests._ddp import run_ranks

pytestmark = [pytest.mark.ddp, pytest.mark.slow]


def test_the_process_group_is_closed_when_the_script_ends(tmp_path: Path):
    results = run_ranks(__file__, [str(tmp_path)], close_group=False)
    assert [code for code, _ in results] == [0, 0]
    for rank in range(2):
        record = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert record == {"open_after_train": True, "open_at_exit": False}


def test_a_rank_that_fails_while_the_other_waits_in_a_collective_ends_both(tmp_path: Path):
    """Rank 1 raises in a callback after step 2 while rank 0 goes on into the step's collectives: rank 1 ends
    (its exit does not wait for a rank that will never meet it) and rank 0's collective fails, as under
    transformers' Trainer (both exit non-zero; nobody waits for the launcher's timeout)."""
    results = run_ranks(__file__, [str(tmp_path), "fail"], close_group=False, check=False, timeout=150)
    assert [code != 0 for code, _ in results] == [True, True], results
    assert "boom from rank 1" in results[1][1]
    assert "RuntimeError" in results[0][1]


def test_a_rank_that_catches_its_failure_and_exits_does_not_wait_for_the_other(tmp_path: Path):
    """The same failure caught by the script, which then ends with ``sys.exit(3)``: rank 1 still does not wait
    at exit for rank 0, which is held in the step's collective."""
    results = run_ranks(__file__, [str(tmp_path), "catch"], close_group=False, check=False, timeout=150)
    # rank 0's collective failed once rank 1 closed its group: a RuntimeError, which the script catches too
    assert [code for code, _ in results] == [3, 3], results


def _record(path: Path, open_after_train: list[bool]) -> None:
    import torch.distributed as dist

    open_at_exit = dist.is_initialized()
    path.write_text(
        json.dumps(
            {
                "open_after_train": open_after_train[0] if open_after_train else None,
                "open_at_exit": open_at_exit,
            }
        )
    )


if __name__ == "__main__":
    import torch.distributed as dist

    from hf_lightning import Trainer, TrainerCallback, TrainingArguments
    from tests.tiny import RegressionModel, regression_data

    class Boom(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2 and os.environ["RANK"] == "1":
                raise RuntimeError("boom from rank 1 at step 2")

    torch.set_num_threads(1)
    out = Path(sys.argv[1])
    failing = sys.argv[2:] in (["fail"], ["catch"])
    seen: list[bool] = []
    atexit.register(_record, out / f"rank{os.environ['RANK']}.json", seen)
    args = TrainingArguments(
        str(out / "run"), use_cpu=True, report_to="none", save_strategy="no", max_steps=6 if failing else 2,
        disable_tqdm=True, logging_steps=1,
    )  # fmt: skip
    callbacks = [Boom()] if failing else []
    trainer = Trainer(
        model=RegressionModel(), args=args, train_dataset=regression_data(64), callbacks=callbacks
    )
    try:
        trainer.train()
    except RuntimeError:
        if sys.argv[2:] == ["catch"]:
            sys.exit(3)
        raise
    seen.append(dist.is_initialized())
