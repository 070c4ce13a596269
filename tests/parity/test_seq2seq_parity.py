"""Parity of Seq2SeqTrainer with transformers.Seq2SeqTrainer 5.24 on a tiny T5 built from a config.

Generated ids are the same. Two documented differences (docs/divergences.md, divergence 3) are tested as
such: the evaluation loss is the per-sample mean (transformers counts a final partial batch as a
full one), and generated ids and labels are padded to the longest generation / label with the pad
token / -100 (transformers pads both with the pad token to ``max_length``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from transformers import T5Config, T5ForConditionalGeneration

import hf_lightning

LIBS = {"theirs": transformers, "ours": hf_lightning}
PAD = 0


def t5() -> T5ForConditionalGeneration:
    torch.manual_seed(0)
    config = T5Config(
        d_model=32, d_ff=64, num_layers=2, num_heads=2, vocab_size=128, decoder_start_token_id=0
    )
    return T5ForConditionalGeneration(config)


def make_data(size: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(size)
    return [
        {
            "input_ids": torch.randint(2, 128, (6,), generator=g),
            "labels": torch.randint(2, 128, (3 + i % 3,), generator=g),
        }
        for i in range(size)
    ]


def collate(batch):
    length = max(len(item["labels"]) for item in batch)
    labels = torch.full((len(batch), length), -100)
    for row, item in enumerate(batch):
        labels[row, : len(item["labels"])] = item["labels"]
    return {"input_ids": torch.stack([item["input_ids"] for item in batch]), "labels": labels}


def predict_both(tmp_path, size: int, **kwargs):
    settings = {
        "per_device_eval_batch_size": 3,
        "use_cpu": True,
        "report_to": "none",
        "disable_tqdm": True,
        "predict_with_generate": True,
        **kwargs,
    }
    outputs = {}
    for name, lib in LIBS.items():
        args = lib.Seq2SeqTrainingArguments(str(tmp_path / name), **settings)
        outputs[name] = lib.Seq2SeqTrainer(model=t5(), args=args, data_collator=collate).predict(
            make_data(size)
        )
    return outputs["theirs"], outputs["ours"]


@pytest.mark.parametrize(
    "settings", [{"generation_max_length": 8}, {"generation_num_beams": 2, "generation_max_length": 6}]
)
def test_generated_ids_match(tmp_path, settings):
    """The generated ids are transformers'; its extra columns up to max_length hold only the pad token."""
    theirs, ours = predict_both(tmp_path, 7, **settings)
    width = ours.predictions.shape[1]
    np.testing.assert_array_equal(ours.predictions, theirs.predictions[:, :width])
    assert (theirs.predictions[:, width:] == PAD).all()


def test_labels_are_padded_with_minus_100_where_transformers_uses_the_pad_token(tmp_path):
    """Divergence 3: labels keep -100 where transformers writes the pad token; real tokens are the same."""
    theirs, ours = predict_both(tmp_path, 7, generation_max_length=8)
    width = ours.label_ids.shape[1]
    real = ours.label_ids != -100
    np.testing.assert_array_equal(ours.label_ids[real], theirs.label_ids[:, :width][real])
    assert (theirs.label_ids[6, 3:] == PAD).all() and (ours.label_ids[6, 3:] == -100).all()


def test_eval_loss_matches_with_full_batches(tmp_path):
    """With full batches only, the loss is transformers'."""
    theirs, ours = predict_both(tmp_path, 6, generation_max_length=4)
    assert ours.metrics["test_loss"] == pytest.approx(theirs.metrics["test_loss"], abs=1e-5)


def test_eval_loss_is_per_sample_with_a_partial_last_batch(tmp_path):
    """Divergence 3: with batches of 3, 3, 1 we weigh the last batch by 1 sample, transformers by 3."""
    theirs, ours = predict_both(tmp_path, 7, generation_max_length=4)
    model, data = t5(), make_data(7)
    model.eval()
    with torch.no_grad():
        losses = [model(**collate(data[i : i + 3])).loss.item() for i in range(0, 7, 3)]
    assert ours.metrics["test_loss"] == pytest.approx(
        (3 * losses[0] + 3 * losses[1] + losses[2]) / 7, rel=1e-6
    )
    assert theirs.metrics["test_loss"] == pytest.approx(sum(losses) / 3, rel=1e-6)


def test_predictions_without_generation_match(tmp_path):
    """predict_with_generate=False: the same logits and labels as transformers."""
    theirs, ours = predict_both(tmp_path, 6, predict_with_generate=False)
    np.testing.assert_allclose(ours.predictions[0], theirs.predictions[0], atol=1e-5, rtol=0)
    np.testing.assert_array_equal(ours.label_ids, theirs.label_ids)
