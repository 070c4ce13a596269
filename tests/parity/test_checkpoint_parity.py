"""Checkpoint parity with transformers.Trainer: which folders are written and kept, the best model, and
checkpoints that each program resumes from the other's run to the same final weights."""

from __future__ import annotations

import os

import pytest
import torch

from tests.parity._run import BASE_ARGS, assert_same_weights
from tests.tiny import RegressionModel, causal_lm_data, regression_data, tiny_gpt2

# A metric that improves at evaluations 1 and 5 when greater is better, at 1, 2 and 4 when lower is better.
SCORES = [0.5, 0.3, 0.4, 0.2, 0.6]
BEST_ARGS = dict(
    eval_strategy="steps",
    eval_steps=2,
    logging_steps=2,
    max_steps=10,
    metric_for_best_model="score",
    per_device_train_batch_size=4,
    learning_rate=0.1,
)


def _libs():
    import transformers

    import hf_lightning

    return {"hf": transformers, "ours": hf_lightning}


def _scripted_metrics(values):
    values = iter(values)
    return lambda prediction: {"score": next(values)}


def _best_runs(tmp_path, **overrides):
    """Both trainers on the same regression run, evaluated every 2 steps with the scripted metric."""
    runs = {}
    for name, lib in _libs().items():
        args = lib.TrainingArguments(
            output_dir=str(tmp_path / name), **{**BASE_ARGS, **BEST_ARGS, **overrides}
        )
        trainer = lib.Trainer(
            model=RegressionModel(),
            args=args,
            train_dataset=regression_data(64),
            eval_dataset=regression_data(8, seed=1),
            compute_metrics=_scripted_metrics(SCORES),
        )
        trainer.train()
        runs[name] = trainer
    return runs


def _folders(trainer) -> list[str]:
    out = trainer.args.output_dir
    return sorted(
        (name for name in os.listdir(out) if name.startswith("checkpoint-")),
        key=lambda name: int(name.split("-")[1]),
    )


def _best_name(trainer) -> str | None:
    best = trainer.state.best_model_checkpoint
    return None if best is None else os.path.basename(best)


@pytest.mark.parametrize(
    ("greater_is_better", "expected"),
    [
        (True, ["checkpoint-2", "checkpoint-10"]),
        (False, ["checkpoint-2", "checkpoint-4", "checkpoint-8"]),
    ],
)
def test_save_strategy_best_writes_only_on_improvement(tmp_path, greater_is_better, expected):
    """save_strategy="best" writes a checkpoint exactly when the metric improves, in either direction."""
    runs = _best_runs(tmp_path, save_strategy="best", greater_is_better=greater_is_better)
    assert _folders(runs["ours"]) == _folders(runs["hf"]) == expected
    for key in ("best_metric", "best_global_step"):
        assert getattr(runs["ours"].state, key) == getattr(runs["hf"].state, key)
    assert _best_name(runs["ours"]) == _best_name(runs["hf"])


@pytest.mark.parametrize("save_strategy", ["best", "steps"])
def test_load_best_model_at_end_restores_the_best_weights(tmp_path, save_strategy):
    """load_best_model_at_end ends with the weights of the best checkpoint, as transformers does."""
    runs = _best_runs(
        tmp_path,
        save_strategy=save_strategy,
        save_steps=2,
        greater_is_better=False,
        load_best_model_at_end=True,
    )
    assert _best_name(runs["ours"]) == _best_name(runs["hf"]) == "checkpoint-8"
    assert_same_weights(runs["hf"], runs["ours"])
    best = RegressionModel()
    from hf_lightning.checkpoint import load_model_weights

    load_model_weights(best, runs["ours"].state.best_model_checkpoint)
    for name, value in best.named_parameters():
        torch.testing.assert_close(dict(runs["ours"].model.named_parameters())[name], value)


@pytest.mark.parametrize(("limit", "greater_is_better"), [(2, False), (2, True), (1, False), (3, True)])
def test_save_total_limit_keeps_newest_and_best(tmp_path, limit, greater_is_better):
    """save_total_limit rotation keeps the newest and the best checkpoints, the same folders as transformers."""
    runs = _best_runs(
        tmp_path,
        save_strategy="steps",
        save_steps=2,
        save_total_limit=limit,
        greater_is_better=greater_is_better,
        load_best_model_at_end=True,
    )
    assert _folders(runs["ours"]) == _folders(runs["hf"])
    assert _best_name(runs["ours"]) in _folders(runs["ours"])


RESUME_ARGS = dict(
    per_device_train_batch_size=2,
    gradient_accumulation_steps=2,
    max_steps=8,
    learning_rate=1e-3,
    warmup_steps=2,
    logging_steps=1,
    save_strategy="steps",
    save_steps=3,
)


def _train_gpt2(lib, output_dir, *, stop_at=None, resume=None):
    callbacks = []
    if stop_at is not None:

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == stop_at:
                control.should_training_stop = True

        callbacks.append(type("StopAt", (lib.TrainerCallback,), {"on_step_end": on_step_end})())
    args = lib.TrainingArguments(output_dir=str(output_dir), **{**BASE_ARGS, **RESUME_ARGS})
    # 14 samples: 7 micro-batches, 4 optimizer steps per epoch; step 6 is in the middle of the second epoch.
    trainer = lib.Trainer(
        model=tiny_gpt2(fix_hf_count=lib.__name__ == "transformers"),
        args=args,
        train_dataset=causal_lm_data(n=14),
        callbacks=callbacks,
    )
    trainer.train(resume_from_checkpoint=None if resume is None else str(resume))
    return trainer


@pytest.mark.parametrize(("writer", "reader"), [("hf", "ours"), ("ours", "hf")])
def test_checkpoint_resumes_in_the_other_program(tmp_path, writer, reader):
    """A mid-epoch checkpoint of one program resumes in the other to the weights of an uninterrupted run."""
    libs = _libs()
    straight = _train_gpt2(libs[writer], tmp_path / "straight")
    _train_gpt2(libs[writer], tmp_path / "first", stop_at=6)
    resumed = _train_gpt2(libs[reader], tmp_path / "second", resume=tmp_path / "first" / "checkpoint-6")
    assert resumed.state.global_step == 8
    assert_same_weights(straight, resumed)
    theirs = {h["step"]: h["loss"] for h in straight.state.log_history if "loss" in h}
    for entry in (h for h in resumed.state.log_history if "loss" in h):
        torch.testing.assert_close(entry["loss"], theirs[entry["step"]], rtol=1e-4, atol=1e-7)
