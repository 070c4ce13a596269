"""``accelerator_config={"split_batches": True}`` on two processes (gloo) as on transformers.

accelerate's ``split_batches`` cuts each batch of ``per_device_train_batch_size`` rows into one slice per
process, so a step of the job sees ``per_device_train_batch_size`` rows in all (not that many per process).
The test launches this file twice as a script; each process trains a tiny Llama with transformers' Trainer
and with hf_lightning's, for ``random`` and ``sequential`` sampling, on 22 rows in batches of 4 (the last
batch completed from the start of the epoch), with evaluation: each rank's micro-batches, every logged
value and the final weights are compared.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from tests._ddp import run_ranks
from tests.parity.test_ddp_split_parity import ARGS, ROWS, RecordingCollator, dataset

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

WORLD = 2
STRATEGIES = ("random", "sequential")
SPLIT = {**ARGS, "per_device_train_batch_size": 4, "per_device_eval_batch_size": 4, "eval_strategy": "epoch",
         "accelerator_config": {"split_batches": True}}  # fmt: skip


def train(lib_name: str, strategy: str, out_dir: str) -> dict:
    import transformers

    import hf_lightning
    from tests.tiny import tiny_llama

    lib = transformers if lib_name == "transformers" else hf_lightning
    collator = RecordingCollator()
    args = lib.TrainingArguments(out_dir, train_sampling_strategy=strategy, **SPLIT)
    data = dataset()
    trainer = lib.Trainer(model=tiny_llama(), args=args, train_dataset=data, eval_dataset=data[: ROWS - 3],
                          data_collator=collator)  # fmt: skip
    trainer.train()
    logs = [
        {k: v for k, v in h.items() if "runtime" not in k and "per_second" not in k}
        for h in trainer.state.log_history
    ]
    state = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return {"batches": collator.batches, "logs": logs, "state": state}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("split_batches")
    run_ranks(__file__, [str(out)], world=WORLD, timeout=900)
    names = [f"{lib}_{s}" for lib in ("transformers", "ours") for s in STRATEGIES]
    return {
        name: [torch.load(out / f"{name}_rank{r}.pt", weights_only=True) for r in range(WORLD)]
        for name in names
    }


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_split_batches_run_is_transformers(runs, strategy):
    for rank in range(WORLD):
        ours, theirs = runs[f"ours_{strategy}"][rank], runs[f"transformers_{strategy}"][rank]
        assert ours["batches"] == theirs["batches"]  # the training and evaluation slices of this rank
        assert all(len(batch) == 2 for batch in ours["batches"])  # 4 rows a step, 2 on each process
        assert [sorted(e) for e in ours["logs"]] == [sorted(e) for e in theirs["logs"]]
        for mine, other in zip(ours["logs"], theirs["logs"]):
            for key, value in other.items():
                assert mine[key] == pytest.approx(value, rel=1e-5, abs=1e-7), (key, other.get("step"))
        for name, value in theirs["state"].items():
            torch.testing.assert_close(ours["state"][name], value, atol=1e-5, rtol=1e-4, msg=name)


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    for lib in ("transformers", "ours"):
        for name in STRATEGIES:
            torch.save(
                train(lib, name, str(target / f"{lib}_{name}")), target / f"{lib}_{name}_rank{rank}.pt"
            )
