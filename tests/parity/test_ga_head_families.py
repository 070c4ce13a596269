"""For every head family, batch 8 x GA 1 and batch 4 x GA 2 on the same rows give the same loss and
gradient norm (docs/divergences.md, 12): the model's loss rule is asked of the model.

BatchNorm layers are kept in eval mode in the BatchNorm rows: their training-mode statistics come from
the micro-batch, so a batch of 8 and two of 4 differ there whatever the accumulation rule. MoE rows
(a router auxiliary loss per micro-batch) and CLIP (a contrastive loss over the batch) are not sums
over rows and are left out; the model zoo compares them with transformers.
"""

from __future__ import annotations

import pytest
import torch

import hf_lightning
from tests.parity._run import BASE_ARGS, step_logs
from tests.parity.zoo_models import ROWS, collate, freeze_batch_norm, row

FAST = ["llama", "llama_seq", "qwen2_token", "resnet", "t5", "wav2vec2_ctc"]
EXCLUDED = {"mixtral", "qwen2_moe", "clip"}  # not sums over rows (see the module docstring)
FAMILY_ROWS = [r.name for r in ROWS if r.name not in EXCLUDED and not r.peft and not r.args]


def _run(name: str, batch: int, steps: int, tmp_path) -> list[dict[str, float]]:
    zoo = row(name)
    model = zoo.build()
    if zoo.batch_norm:
        freeze_batch_norm(model)
    args = hf_lightning.TrainingArguments(
        output_dir=str(tmp_path / f"{name}-{batch}x{steps}"),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=steps,
        train_sampling_strategy="sequential",
        logging_steps=1,
        max_steps=2,
        learning_rate=1e-2,
        optim="sgd",
        lr_scheduler_type="constant",
        **BASE_ARGS,
    )
    trainer = hf_lightning.Trainer(
        model=model, args=args, train_dataset=zoo.data(16, 1), data_collator=zoo.collator or collate
    )
    trainer.train()
    return step_logs(trainer)


@pytest.mark.parametrize(
    "name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in FAMILY_ROWS]
)
def test_accumulation_equals_the_big_batch(name, tmp_path):
    """Batch 8 x GA 1 and batch 4 x GA 2 log the same losses and gradient norms (1e-6) at both steps."""
    big, small = _run(name, 8, 1, tmp_path), _run(name, 4, 2, tmp_path)
    assert len(big) == len(small) == 2
    for key in ("loss", "grad_norm"):
        torch.testing.assert_close(
            torch.tensor([h[key] for h in small], dtype=torch.float64),
            torch.tensor([h[key] for h in big], dtype=torch.float64),
            rtol=1e-6,
            atol=1e-6,
            msg=lambda m, key=key: f"{name} {key}: {m}",
        )
