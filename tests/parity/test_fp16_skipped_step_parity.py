"""An fp16 update the gradient scaler skips (inf gradients) leaves the learning-rate schedule where it was, and
``trainer.accelerator.optimizer_step_was_skipped`` says so, as under transformers.

No GPU here: both trainers get a real ``torch.amp.GradScaler("cpu")``, transformers' through its
accelerator (what its own tests do), ours through Lightning's ``MixedPrecision`` plugin (the one a GPU
``fp16=True`` run builds). A gradient hook turns one batch's gradient into inf.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("transformers")

POISONED = 4  # the sample whose batch (the third) gets an inf gradient


class _Data(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 12

    def __getitem__(self, i: int) -> dict:
        x = torch.tensor([i / 10])
        return {"input_ids": x, "labels": x / 2, "poison": i == POISONED}


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(1, 1, bias=False)
        self.linear.weight.register_hook(self._poison)
        self.poisoned = False

    def _poison(self, grad: torch.Tensor) -> torch.Tensor:
        return torch.full_like(grad, float("inf")) if self.poisoned else grad

    def forward(self, input_ids, labels, poison):
        self.poisoned = bool(poison.any())
        return {"loss": nn.functional.mse_loss(self.linear(input_ids).float(), labels)}


def _run(library: str, optim: str, tmp_path, monkeypatch) -> dict:
    if library == "transformers":
        from transformers import Trainer, TrainerCallback, TrainingArguments
    else:
        from lightning.pytorch.plugins.precision import MixedPrecision
        from lightning.pytorch.trainer.connectors import accelerator_connector

        from hf_lightning import Trainer, TrainerCallback, TrainingArguments

        monkeypatch.setattr(  # what Lightning builds for fp16 on a GPU, here on the CPU
            accelerator_connector._AcceleratorConnector,
            "_check_and_init_precision",
            lambda self: MixedPrecision(
                "16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=16.0)
            ),
        )
    skipped: list[bool] = []

    class Watch(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            skipped.append(trainer.accelerator.optimizer_step_was_skipped)

    torch.manual_seed(0)
    args = TrainingArguments(
        output_dir=str(tmp_path / library),
        per_device_train_batch_size=2,
        max_steps=6,
        use_cpu=True,
        fp16=True,
        optim=optim,
        learning_rate=1e-2,
        train_sampling_strategy="sequential",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        report_to="none",
        remove_unused_columns=False,
    )
    trainer = Trainer(model=_Model(), args=args, train_dataset=_Data(), callbacks=[Watch()])
    if library == "transformers":
        trainer.accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=16.0)
        trainer.accelerator.native_amp = True
    trainer.train()
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    return {
        "skipped": skipped,
        "updates": max(int(s["step"]) for s in optimizer.state.values()),
        "scheduler_steps": trainer.lr_scheduler.last_epoch,
        "weight": trainer.model.linear.weight.item(),
        "logs": [
            v for e in trainer.state.log_history if "loss" in e for v in (e["loss"], e["learning_rate"])
        ],
    }


@pytest.mark.parametrize("optim", ["adamw_torch", "adamw_torch_fused"])
def test_a_skipped_fp16_update_does_not_step_the_schedule(optim, tmp_path, monkeypatch):
    """With a plain AdamW the scaler skips the update (five updates, five scheduler steps). A fused AdamW takes
    the scaler into its own step and skips inside it: accelerate sees the step called, so transformers
    reports nothing skipped and steps the schedule six times; ours the same."""
    theirs = _run("transformers", optim, tmp_path, monkeypatch)
    ours = _run("hf_lightning", optim, tmp_path, monkeypatch)
    fused = optim.endswith("fused")
    assert theirs["skipped"] == [False, False, not fused, False, False, False]
    assert ours["skipped"] == theirs["skipped"]
    assert (ours["updates"], ours["scheduler_steps"]) == (theirs["updates"], theirs["scheduler_steps"])
    assert theirs["scheduler_steps"] == (6 if fused else 5)
    assert ours["weight"] == pytest.approx(theirs["weight"], abs=1e-7)
    assert ours["logs"] == pytest.approx(theirs["logs"], abs=1e-7)
