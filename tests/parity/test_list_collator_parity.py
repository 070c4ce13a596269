"""A collator that returns a list (TRL's identity collator in GRPO/RLOO) reaches ``compute_loss`` as that
list, one per micro-batch, with gradient accumulation too, and trains as on transformers.

The Trainer's windows of micro-batches have their own type (``adapters/windows.py``), so a micro-batch
that is itself a list of dicts is never read as a window.
"""

from __future__ import annotations

import pytest
import torch
import transformers

import hf_lightning


def _run(trainer_cls, args_cls, out, ga: int) -> tuple[list[float], list]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32))
    data = [{"ids": [i % 60 + 1, (i * 7) % 60 + 1, 3, 4]} for i in range(16)]
    seen: list = []

    class RawRows(trainer_cls):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            seen.append((type(inputs).__name__, len(inputs), type(inputs[0]).__name__, num_items_in_batch))
            ids = torch.tensor([row["ids"] for row in inputs], device=model.device)
            outputs = model(input_ids=ids, labels=ids)
            return (outputs.loss, outputs) if return_outputs else outputs.loss

    args = args_cls(str(out), per_device_train_batch_size=4, gradient_accumulation_steps=ga, max_steps=3,
                    logging_steps=1, report_to="none", use_cpu=True, remove_unused_columns=False,
                    save_strategy="no")  # fmt: skip
    trainer = RawRows(model=model, args=args, train_dataset=data, data_collator=lambda rows: rows)
    trainer.train()
    return [e["loss"] for e in trainer.state.log_history if "loss" in e], seen


@pytest.mark.parametrize("ga", [1, 2])
def test_list_collator_trains_as_on_transformers(tmp_path, ga):
    theirs = _run(transformers.Trainer, transformers.TrainingArguments, tmp_path / "hf", ga)
    ours = _run(hf_lightning.Trainer, hf_lightning.TrainingArguments, tmp_path / "hl", ga)
    assert ours[1] == theirs[1]  # each micro-batch is the collator's list of 4 rows
    assert len(ours[1]) == 3 * ga and ours[1][0][:3] == ("list", 4, "dict")
    assert ours[0] == pytest.approx(theirs[0], abs=1e-5)
