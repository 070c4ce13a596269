"""The Trainer composed of named parts: delegation keeps transformers' methods overridable, one rule per decision."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

import hf_lightning
from hf_lightning.checkpoint.rotation import save_tracked_checkpoint
from hf_lightning.loss import loss_is_scaled_for_ga
from hf_lightning.trainer.evaluation import Evaluator
from tests.tiny import RegressionModel, regression_data


def make_trainer(tmp_path, cls=hf_lightning.Trainer, **overrides):
    """A Trainer of the tiny regression model; ``overrides`` replace or add ``TrainingArguments`` fields."""
    defaults = dict(report_to="none", use_cpu=True, disable_tqdm=True, save_strategy="no")
    defaults.update(per_device_train_batch_size=8, max_steps=2)
    args = hf_lightning.TrainingArguments(output_dir=str(tmp_path / "out"), **{**defaults, **overrides})
    return cls(model=RegressionModel(), args=args, train_dataset=regression_data(32))


def test_delegated_method_keeps_the_parts_signature_and_docstring():
    """``Trainer.evaluate`` shows transformers' parameters and the evaluator's docstring."""
    parameters = list(inspect.signature(hf_lightning.Trainer.evaluate).parameters)
    assert parameters == ["self", "eval_dataset", "ignore_keys", "metric_key_prefix"]
    assert hf_lightning.Trainer.evaluate.__doc__ == Evaluator.evaluate.__doc__
    assert hf_lightning.Trainer.evaluate.__qualname__ == "Trainer.evaluate"


def test_an_override_of_a_delegated_method_runs_when_a_part_calls_it(tmp_path):
    """A subclass's ``log`` receives the training logs that ``TrainingRun`` writes."""
    seen = []

    class LoggingTrainer(hf_lightning.Trainer):
        def log(self, logs, start_time=None):
            seen.append(dict(logs))
            super().log(logs, start_time)

    trainer = make_trainer(tmp_path, cls=LoggingTrainer, logging_steps=1)
    trainer.train()
    assert [logs["loss"] for logs in seen if "loss" in logs] == [
        entry["loss"] for entry in trainer.state.log_history if "loss" in entry
    ]
    assert len(seen) == len(trainer.state.log_history) == 3  # two steps, then the train metrics


def test_search_clone_has_its_own_parts(tmp_path):
    """A trial's copy of the trainer gets fresh parts bound to the copy, not to the original."""
    trainer = make_trainer(tmp_path)
    clone = trainer.search.clone()
    assert clone.run.trainer is clone and clone.checkpoints.trainer is clone
    assert clone.run is not trainer.run


def test_best_checkpoint_survives_rotation(tmp_path):
    """best -> save -> rotate: the best folder is named in the state and kept by the rotation."""
    run_dir = str(tmp_path)
    written = []

    def write_at(step):
        def write(best):
            folder = os.path.join(run_dir, f"checkpoint-{step}")
            os.makedirs(folder)
            written.append(best)
            return folder

        return write

    for step in (1, 2, 3):
        _, best = save_tracked_checkpoint(
            run_dir,
            step,
            best_global_step=1,
            best_model_checkpoint=None,
            write=write_at(step),
            save_total_limit=1,
            is_saver=True,
        )
    assert written == [os.path.join(run_dir, "checkpoint-1")] * 3
    assert sorted(os.listdir(run_dir)) == ["checkpoint-1", "checkpoint-3"]


@pytest.mark.parametrize(
    "accepts, loss_func, num_items, override, scaled",
    [
        (True, None, torch.tensor(4), None, True),
        (True, None, None, None, False),
        (False, None, torch.tensor(4), None, False),
        (False, lambda *a: 0, None, None, True),
        (True, None, torch.tensor(4), False, False),
    ],
)
def test_ga_scaling_rule(accepts, loss_func, num_items, override, scaled):
    """A loss is already scaled for accumulation when the model or compute_loss_func normalised it."""
    assert loss_is_scaled_for_ga(accepts, loss_func, num_items, override=override) is scaled
