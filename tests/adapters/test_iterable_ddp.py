"""An IterableDataset trained on 2 CPU processes (gloo): the same shares of the stream as transformers.

transformers (accelerate's batch dispatching) gives process r the r-th batch of every group of
``world`` batches and splits the stream's last group evenly, completing it with rows from the start.
The test launches this file as 2 processes for transformers.Trainer and again for
hf_lightning.Trainer; each process records the sample ids its model trained on, step by step. Both
runs must record the same ids on each rank and log the same losses over the first pass of the stream
(transformers 5 no longer seeds the dataset's generator per epoch, as its documentation says it does;
hf_lightning does, so later passes differ by design).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import IterableDataset

from tests._ddp import run_ranks

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

WORLD, SAMPLES, BATCH, MAX_STEPS = 2, 11, 2, 5  # 3 steps per pass over the stream; the 2nd pass stops early


class Stream(IterableDataset):
    """Sample i: x = i, label 2i + 1, in a shuffled order drawn from ``generator`` (seeded per epoch)."""

    def __init__(self) -> None:
        self.generator = torch.Generator()

    def __iter__(self):
        for i in torch.randperm(SAMPLES, generator=self.generator).tolist():
            yield {"input_x": torch.tensor(float(i)), "labels": torch.tensor(2.0 * i + 1.0)}


class Recording(nn.Module):
    """y = a x + b; records the x values of every training forward."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(0.5))
        self.b = nn.Parameter(torch.tensor(0.0))
        self.seen: list[list[int]] = []

    def forward(self, input_x: torch.Tensor, labels: torch.Tensor | None = None):
        if self.training:
            self.seen.append([int(v) for v in input_x.tolist()])
        y = self.a * input_x + self.b
        return (nn.functional.mse_loss(y, labels), y) if labels is not None else (y,)


def train(lib_name: str, out_dir: str) -> dict:
    lib = __import__(lib_name)
    stream = Stream()
    stream.generator.manual_seed(0)  # hf_lightning seeds it per epoch as the documentation says
    args = lib.TrainingArguments(
        out_dir,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        save_strategy="no",
        per_device_train_batch_size=BATCH,
        max_steps=MAX_STEPS,
        learning_rate=0.01,
        optim="sgd",
        lr_scheduler_type="constant",
        logging_steps=1,
        seed=0,
    )
    model = Recording()
    trainer = lib.Trainer(model=model, args=args, train_dataset=stream)
    trainer.train()
    return {
        "seen": model.seen,
        "a": float(model.a),
        "b": float(model.b),
        "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
    }


def launch(out: Path, lib_name: str) -> list[dict]:
    run_ranks(__file__, [str(out), lib_name], world=WORLD)
    return [json.loads((out / f"{lib_name}_rank{rank}.json").read_text()) for rank in range(WORLD)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    out = tmp_path_factory.mktemp("iterable_ddp")
    return {name: launch(out, name) for name in ("transformers", "hf_lightning")}


def test_each_rank_trains_on_its_own_share_of_the_stream(runs):
    ours = [rank["seen"] for rank in runs["hf_lightning"]]
    assert len(ours[0]) == len(ours[1]) == MAX_STEPS
    first_pass = [x for rank in ours for batch in rank[:3] for x in batch]
    # The pass covers the stream; its last group (3 rows) is completed with one row from the start.
    assert set(first_pass) == set(range(SAMPLES)) and len(first_pass) == SAMPLES + 1
    assert not set(ours[0][0]) & set(ours[1][0])  # the ranks' first batches differ


def test_shares_are_transformers_shares(runs):
    """Same sample ids on each rank and step as transformers' dispatcher gives (the epoch-0 order is the
    generator's seed-0 order in both; hf_lightning draws epoch 1's from seed + 1)."""
    for ours, theirs in zip(runs["hf_lightning"], runs["transformers"]):
        assert ours["seen"][:3] == theirs["seen"][:3]


def test_same_losses_as_transformers_over_the_first_pass(runs):
    for ours, theirs in zip(runs["hf_lightning"], runs["transformers"]):
        torch.testing.assert_close(ours["losses"][:3], theirs["losses"][:3], rtol=1e-5, atol=1e-7)


if __name__ == "__main__":
    torch.set_num_threads(1)
    target, lib_name = Path(sys.argv[1]), sys.argv[2]
    result = train(lib_name, str(target / lib_name))
    (target / f"{lib_name}_rank{os.environ['RANK']}.json").write_text(json.dumps(result))
