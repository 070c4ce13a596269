"""A sampler from a subclass's ``_get_train_sampler`` goes through accelerate's ``prepare`` as in transformers:
a ``RandomSampler`` is drawn seeded (``SeedableRandomSampler``: ``seed + epoch``), and under several processes
each rank gets its share of the batches (TRL's GRPO ``RepeatSampler``: ``tests/parity/test_trl_parity.py``).
The Trainer's own samplers deal the processes themselves and are used as they are."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch.utils.data import RandomSampler

import hf_lightning


def _order(mod, out, sampler: str) -> tuple[list[list[int]], list[float]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32))
    model.loss_type = "ForCausalLM"  # transformers counts shifted labels (docs/divergences.md)
    rows = [
        {"input_ids": torch.tensor([i, 2, 3, 4]), "labels": torch.tensor([i, 2, 3, 4])} for i in range(12)
    ]
    seen: list[list[int]] = []

    class Custom(mod.Trainer):
        def _get_train_sampler(self, train_dataset=None):
            dataset = self.train_dataset if train_dataset is None else train_dataset
            if sampler == "random":
                return RandomSampler(dataset)
            return torch.utils.data.SequentialSampler(list(reversed(range(len(dataset)))))

        def compute_loss(self, model, inputs, **kwargs):
            seen.append(inputs["input_ids"][:, 0].tolist())
            return super().compute_loss(model, inputs, **kwargs)

    args = mod.TrainingArguments(str(out), per_device_train_batch_size=4, num_train_epochs=2, seed=3,
                                 logging_steps=1, report_to="none", use_cpu=True, save_strategy="no")  # fmt: skip
    trainer = Custom(model=model, args=args, train_dataset=rows)
    trainer.train()
    return seen, [e["loss"] for e in trainer.state.log_history if "loss" in e]


@pytest.mark.parametrize("sampler", ["random", "sequential"])
def test_subclass_sampler_order_is_transformers(tmp_path, sampler):
    theirs = _order(transformers, tmp_path / "hf", sampler)
    ours = _order(hf_lightning, tmp_path / "hl", sampler)
    assert ours[0] == theirs[0] and len(ours[0]) == 6
    assert ours[1] == pytest.approx(theirs[1], abs=1e-5)
