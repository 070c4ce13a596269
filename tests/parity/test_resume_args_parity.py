"""Resuming with changed step intervals or batch size warns as transformers does."""

from __future__ import annotations

import logging

import transformers
from transformers.trainer_callback import TrainerState as TheirState
from transformers.trainer_utils import compare_trainer_and_checkpoint_args as theirs

import hf_lightning
from hf_lightning.callbacks import TrainerState
from hf_lightning.checkpoint.resume_args import compare_trainer_and_checkpoint_args as ours


def _messages(caplog, logger_prefix):
    return [r.getMessage() for r in caplog.records if r.name.startswith(logger_prefix)]


def test_the_warning_lists_each_difference_like_transformers(tmp_path, caplog):
    """logging/eval/save steps and the per-device batch size each get one line, in transformers' words."""
    kwargs = dict(
        output_dir=str(tmp_path), logging_steps=3, eval_steps=7, save_steps=11, per_device_train_batch_size=4
    )
    stored = dict(logging_steps=5, eval_steps=7, save_steps=13, train_batch_size=8)
    with caplog.at_level(logging.WARNING):
        ours(hf_lightning.TrainingArguments(**kwargs), TrainerState(**stored))
        theirs(transformers.TrainingArguments(**kwargs, use_cpu=True), TheirState(**stored))
    mine, reference = _messages(caplog, "hf_lightning"), _messages(caplog, "transformers")
    assert len(mine) == 1 and mine == reference
    assert "save_steps: 11 (from args) != 13" in mine[0] and "eval_steps" not in mine[0]


def test_no_warning_when_the_arguments_agree(tmp_path, caplog):
    """Same intervals and batch size: nothing is logged."""
    args = hf_lightning.TrainingArguments(
        output_dir=str(tmp_path), logging_steps=9, per_device_train_batch_size=2
    )
    with caplog.at_level(logging.WARNING):
        ours(args, TrainerState(logging_steps=9, eval_steps=9, save_steps=500, train_batch_size=2))
    assert _messages(caplog, "hf_lightning") == []


def test_a_resume_with_nothing_left_to_train_begins_and_ends_like_transformers(tmp_path):
    """Resuming from a checkpoint already at max_steps: no step runs, but the callbacks see on_train_begin and
    on_train_end, eval_on_start evaluates, and the model counts as prepared (no model_preparation_time)."""
    from tests.tiny import RegressionModel, regression_data

    seen = {}
    for lib in (transformers, hf_lightning):

        class Events(lib.TrainerCallback):
            def __init__(self):
                self.events = []

            def on_train_begin(self, args, state, control, **kwargs):
                self.events.append(("train_begin", state.global_step))

            def on_evaluate(self, args, state, control, **kwargs):
                self.events.append(("evaluate", state.global_step))

            def on_train_end(self, args, state, control, **kwargs):
                self.events.append(("train_end", state.global_step))

        def trainer(events=None, lib=lib):
            args = lib.TrainingArguments(str(tmp_path / lib.__name__), max_steps=2, save_steps=2, eval_on_start=True,
                                         eval_strategy="steps", eval_steps=5, per_device_train_batch_size=4,
                                         report_to="none", disable_tqdm=True, use_cpu=True)  # fmt: skip
            data = regression_data(n=8)
            return lib.Trainer(RegressionModel(), args, train_dataset=data, eval_dataset=data,
                               callbacks=[events] if events else None)  # fmt: skip

        trainer().train()
        events = Events()
        resumed = trainer(events)
        output = resumed.train(resume_from_checkpoint=True)
        seen[lib.__name__] = (events.events, output.global_step, sorted(resumed.evaluate()))
    assert seen["hf_lightning"] == seen["transformers"]
    assert seen["hf_lightning"][0] == [("train_begin", 2), ("evaluate", 2), ("train_end", 2), ("evaluate", 2)]


def test_resuming_from_a_model_folder_raises_the_errors_transformers_raises(tmp_path):
    """``resume_from_checkpoint`` = a ``save_pretrained`` folder (weights, no trainer_state.json): transformers
    loads the weights and fails opening trainer_state.json (FileNotFoundError); a folder without weights is
    a ValueError in both. Ours names the folder and what it lacks."""
    import pytest

    from tests.tiny import tiny_gpt2

    model_dir = tmp_path / "model"
    tiny_gpt2().save_pretrained(model_dir)
    empty = tmp_path / "empty"
    empty.mkdir()
    data = [{"input_ids": [1, 2, 3, 4], "labels": [1, 2, 3, 4]}] * 4
    for lib in (transformers, hf_lightning):
        args = lib.TrainingArguments(
            str(tmp_path / lib.__name__), max_steps=1, report_to="none", use_cpu=True
        )
        trainer = lib.Trainer(tiny_gpt2(), args, train_dataset=data)
        with pytest.raises(FileNotFoundError, match="trainer_state.json"):
            trainer.train(resume_from_checkpoint=str(model_dir))
        with pytest.raises(ValueError, match="Can't find a valid checkpoint at"):
            trainer.train(resume_from_checkpoint=str(empty))
