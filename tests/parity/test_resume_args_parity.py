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
