"""Run transformers.Trainer and hf_lightning.Trainer on the same work and collect what they observe."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

BASE_ARGS: dict[str, Any] = dict(
    report_to="none", save_strategy="no", use_cpu=True, disable_tqdm=True, seed=0
)


def run_both(
    model_fn: Callable[[str], torch.nn.Module],
    train_dataset: Any,
    tmp_path,
    *,
    trainer_kwargs: dict[str, Any] | None = None,
    **arg_kwargs: Any,
) -> dict[str, Any]:
    """Train the same model on the same data with both trainers; returns {'hf': trainer, 'ours': trainer}."""
    import transformers

    import hf_lightning

    out = {}
    for name, lib in (("hf", transformers), ("ours", hf_lightning)):
        args = lib.TrainingArguments(output_dir=str(tmp_path / name), **{**BASE_ARGS, **arg_kwargs})
        trainer = lib.Trainer(
            model=model_fn(name), args=args, train_dataset=train_dataset, **(trainer_kwargs or {})
        )
        trainer.train()
        out[name] = trainer
    return out


def step_logs(trainer: Any) -> list[dict[str, float]]:
    """The per-step training entries of log_history (those with a loss)."""
    return [h for h in trainer.state.log_history if "loss" in h]


def assert_same_logs(
    hf: Any, ours: Any, keys=("loss", "learning_rate", "grad_norm"), rel: float = 1e-4
) -> None:
    theirs, mine = step_logs(hf), step_logs(ours)
    assert [h["step"] for h in mine] == [h["step"] for h in theirs]
    for a, b in zip(theirs, mine):
        for key in keys:
            torch.testing.assert_close(b[key], a[key], rtol=rel, atol=1e-7, msg=f"{key} at step {a['step']}")
        assert b["epoch"] == a["epoch"]


def assert_same_weights(hf: Any, ours: Any, atol: float = 1e-5) -> None:
    theirs = dict(hf.model.named_parameters())
    for name, p in ours.model.named_parameters():
        torch.testing.assert_close(p.detach(), theirs[name].detach(), atol=atol, rtol=1e-4, msg=name)
