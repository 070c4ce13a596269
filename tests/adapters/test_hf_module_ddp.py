"""HFModule's eval_loss on 2 CPU processes (gloo): the mean over every rank's samples.

The test launches this file twice as a script, with the variables torchrun would set. Each rank
validates the same tiny GPT-2 with a plain ``lightning.Trainer(strategy="ddp")`` on 10 sequences of
different lengths (Lightning's distributed sampler gives each rank 5, in batches of 4 and 1) and writes
what it logged; the test recomputes the figure from those batches in one process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tests._ddp import run_ranks
from tests.tiny import causal_lm_data, tiny_gpt2

pytestmark = [pytest.mark.ddp, pytest.mark.slow]


def _pad(rows: list[dict]) -> dict[str, torch.Tensor]:
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    labels = torch.full((len(rows), width), -100)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        ids[i, :n], mask[i, :n], labels[i, :n] = r["input_ids"], 1, r["labels"]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _loader():
    from torch.utils.data import DataLoader

    data = [
        {key: value[: 4 + (i * 5) % 9] for key, value in row.items()}  # lengths 4..12
        for i, row in enumerate(causal_lm_data(10, seq_len=12))
    ]
    return DataLoader(data, batch_size=4, collate_fn=_pad)


def _validate(**trainer_kwargs) -> float:
    import lightning as L

    from hf_lightning import TrainingArguments
    from hf_lightning.adapters import HFModule

    trainer = L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **trainer_kwargs,
    )
    (metrics,) = trainer.validate(
        HFModule(tiny_gpt2(dropout=0.0), TrainingArguments("unused")), _loader(), verbose=False
    )
    return float(metrics["eval_loss"])


def test_eval_loss_over_two_ranks_is_the_mean_over_all_samples(tmp_path):
    """Both ranks report the mean over the 10 samples of the loss of the batch each sample was in.

    As in transformers, a batch's loss is its per-token mean, so the figure depends on which samples
    share a batch. Here rank r validates samples r, r+2, ... in batches of 4 and 1.
    """
    run_ranks(__file__, [str(tmp_path)], world=2)
    model = tiny_gpt2(dropout=0.0).eval()
    rows = _loader().dataset
    batches = [[0, 2, 4, 6], [8], [1, 3, 5, 7], [9]]
    with torch.no_grad():
        losses = [float(model(**_pad([rows[i] for i in b])).loss) * len(b) for b in batches]
    expected = sum(losses) / len(rows)
    for rank in range(2):
        assert float((tmp_path / f"rank{rank}.txt").read_text()) == pytest.approx(expected, rel=1e-5)


if __name__ == "__main__":
    import os

    torch.set_num_threads(1)
    value = _validate(devices=2, strategy="ddp")
    Path(sys.argv[1], f"rank{os.environ['RANK']}.txt").write_text(repr(value))
