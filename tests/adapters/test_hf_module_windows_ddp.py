"""AccumulationWindows under 2 CPU processes (gloo): each sample is trained on by exactly one process.

The test launches this file twice as a script. With a DistributedSampler inside the windows each
rank records the sample ids it trained on; with a plain DataLoader inside, each rank records the
error raised before the first step.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from tests._ddp import run_ranks

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

ROWS = 16


def _fit(sharded: bool) -> list[int]:
    import lightning as L
    from torch.utils.data import DataLoader, DistributedSampler

    from hf_lightning import TrainingArguments
    from hf_lightning.adapters import AccumulationWindows, HFModule
    from tests.tiny import RegressionModel

    data = [{"input_x": torch.tensor(float(i)), "labels": torch.tensor(float(i))} for i in range(ROWS)]
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])  # set by the launcher
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=False) if sharded else None
    loader = DataLoader(data, batch_size=2, sampler=sampler)
    seen: list[int] = []

    class Record(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.extend(int(x) for micro in batch for x in micro["input_x"])

    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Record()],
    )
    module = HFModule(RegressionModel(), TrainingArguments(gradient_accumulation_steps=2))
    trainer.fit(module, AccumulationWindows(loader, 2))
    return seen


def test_each_sample_is_trained_on_by_exactly_one_process(tmp_path):
    """DistributedSampler inside the windows: the two ranks' samples are disjoint and cover the dataset."""
    run_ranks(__file__, [str(tmp_path), "sharded"], world=2)
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == list(range(ROWS))


def test_an_unsharded_loader_raises_before_the_first_step_on_every_rank(tmp_path):
    """A plain DataLoader inside the windows: each rank raises naming DistributedSampler, having trained nothing."""
    run_ranks(__file__, [str(tmp_path), "plain"], world=2)
    for rank in range(2):
        assert "DistributedSampler" in (tmp_path / f"rank{rank}.json").read_text()


if __name__ == "__main__":
    torch.set_num_threads(1)
    out = Path(sys.argv[1], f"rank{os.environ['RANK']}.json")
    try:
        result: object = _fit(sharded=sys.argv[2] == "sharded")
    except ValueError as error:
        result = str(error)
    out.write_text(json.dumps(result))
