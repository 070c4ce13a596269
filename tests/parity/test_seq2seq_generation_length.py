"""Seq2Seq evaluation during training: every batch generates as the first (docs/divergences.md, 13).

transformers 5.24 writes ``max_length=20`` into the model's generation config after the first
``generate`` of an evaluation, so its later batches generate one token less than the first. We
leave the user's generation config alone: every batch of every evaluation generates as the first.
"""

from __future__ import annotations

import pytest
import transformers

import hf_lightning
from tests.parity.test_seq2seq_parity import collate, make_data, t5


def _generated_lengths(lib, tmp_path) -> tuple[list[int], int | None]:
    model = t5()
    lengths: list[int] = []
    generate = model.generate

    def recording_generate(*args, **kwargs):
        out = generate(*args, **kwargs)
        lengths.append(int(out.shape[1]))
        return out

    model.generate = recording_generate
    args = lib.Seq2SeqTrainingArguments(
        str(tmp_path / lib.__name__),
        per_device_eval_batch_size=3,
        per_device_train_batch_size=3,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        predict_with_generate=True,
        max_steps=2,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="no",
    )
    trainer = lib.Seq2SeqTrainer(
        model=model,
        args=args,
        data_collator=collate,
        train_dataset=make_data(6),
        eval_dataset=make_data(7),
        compute_metrics=lambda prediction: {"calls": 0.0},
    )
    trainer.train()
    return lengths, model.generation_config.max_length


def test_every_evaluation_batch_generates_as_the_first(tmp_path):
    """Two evaluations of 3 batches: ours all generate the first batch's length; the config is untouched.

    Neither run sets a length, so transformers' ``generate`` warns in both that it uses its default."""
    default_length = r"model-agnostic default `max_length` \(=21\)"
    with pytest.warns(UserWarning, match=default_length):
        theirs, their_config = _generated_lengths(transformers, tmp_path)
    with pytest.warns(UserWarning, match=default_length):
        ours, our_config = _generated_lengths(hf_lightning, tmp_path)
    assert ours[0] == theirs[0] and set(ours) == {ours[0]} and len(ours) == len(theirs) == 6
    assert min(theirs[1:]) == theirs[0] - 1 and their_config == 20  # transformers' shorter later batches
    assert our_config is None
