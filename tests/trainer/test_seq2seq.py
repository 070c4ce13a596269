"""Seq2SeqTrainer: generation during evaluation, its arguments, and the documented loss and padding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import GenerationConfig, T5Config, T5ForConditionalGeneration

from hf_lightning import Seq2SeqTrainer, Seq2SeqTrainingArguments

PAD = 0


def t5() -> T5ForConditionalGeneration:
    torch.manual_seed(0)
    config = T5Config(
        d_model=32, d_ff=64, num_layers=2, num_heads=2, vocab_size=128, decoder_start_token_id=0
    )
    return T5ForConditionalGeneration(config)


def make_data(size: int = 7) -> list[dict[str, torch.Tensor]]:
    """Inputs of 6 tokens; targets of 3 to 5 tokens."""
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


def make_trainer(tmp_path, model=None, **kwargs) -> Seq2SeqTrainer:
    settings = {
        "per_device_eval_batch_size": 3,
        "use_cpu": True,
        "report_to": "none",
        "disable_tqdm": True,
        "save_strategy": "no",
        "predict_with_generate": True,
        **kwargs,
    }
    evaluates = settings.get("eval_strategy", "no") != "no"  # Trainer() refuses a strategy without data
    return Seq2SeqTrainer(
        model=model or t5(),
        args=Seq2SeqTrainingArguments(str(tmp_path), **settings),
        data_collator=collate,
        eval_dataset=make_data(5) if evaluates else None,
    )


class GenerateSpy:
    """Stands in for ``model.generate``: records the keyword arguments, returns ids of a chosen length per call."""

    def __init__(self, lengths: list[int]) -> None:
        self.lengths, self.calls = list(lengths), []

    def __call__(self, input_ids, labels=None, **kwargs):
        self.calls.append(kwargs)
        length = self.lengths[len(self.calls) - 1]
        return torch.arange(1, length + 1).repeat(input_ids.shape[0], 1)


def test_generated_ids_are_padded_with_the_pad_token_to_the_longest(tmp_path):
    """Generations of 4, 6 and 2 tokens: every row padded with the pad token to 6 (not -100, not max_length)."""
    trainer = make_trainer(tmp_path)
    trainer.model.generate = GenerateSpy([4, 6, 2])
    predictions = trainer.predict(make_data()).predictions
    assert predictions.shape == (7, 6)
    np.testing.assert_array_equal(predictions[0], [1, 2, 3, 4, PAD, PAD])
    np.testing.assert_array_equal(predictions[3], [1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(predictions[6], [1, 2, PAD, PAD, PAD, PAD])


def test_labels_are_padded_with_minus_100(tmp_path):
    """Labels keep -100 where there is no target token, even in a shorter last batch."""
    label_ids = make_trainer(tmp_path).predict(make_data()).label_ids
    assert label_ids.shape == (7, 5)
    expected_lengths = [3 + i % 3 for i in range(7)]
    assert [(row != -100).sum() for row in label_ids] == expected_lengths


def test_eval_loss_is_the_per_sample_mean_with_a_partial_last_batch(tmp_path):
    """Divergence 3: batches of 3, 3 and 1 samples weigh 3, 3 and 1 in eval_loss."""
    model, data = t5(), make_data()
    model.eval()
    with torch.no_grad():
        losses = [model(**collate(data[i : i + 3])).loss.item() for i in range(0, 7, 3)]
    expected = (3 * losses[0] + 3 * losses[1] + losses[2]) / 7
    metrics = make_trainer(tmp_path, model=model, generation_max_length=4).evaluate(data)
    assert metrics["eval_loss"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    ("settings", "call_kwargs", "expected"),
    [
        ({}, {}, {}),
        ({"generation_max_length": 9, "generation_num_beams": 2}, {}, {"max_length": 9, "num_beams": 2}),
        ({"generation_max_length": 9}, {"max_new_tokens": 2}, {"max_new_tokens": 2}),
        (
            {"generation_num_beams": 2},
            {"num_beams": 3, "do_sample": False},
            {"num_beams": 3, "do_sample": False},
        ),
    ],
)
def test_generation_arguments_reach_generate(tmp_path, settings, call_kwargs, expected):
    """generation_max_length / generation_num_beams fill in what **gen_kwargs of predict leave unset."""
    trainer = make_trainer(tmp_path, **settings)
    spy = trainer.model.generate = GenerateSpy([3, 3, 3])
    trainer.predict(make_data(), **call_kwargs)
    assert spy.calls[0] == expected


def test_gen_kwargs_apply_to_every_dataset_of_a_dict(tmp_path):
    """evaluate(**gen_kwargs) with a dict of eval datasets generates with them for each dataset."""
    trainer = make_trainer(tmp_path, generation_max_length=9)
    trainer.compute_metrics = lambda eval_pred: {}  # without metrics evaluate() computes only the loss
    trainer.eval_dataset = {"a": make_data(3), "b": make_data(3)}
    spy = trainer.model.generate = GenerateSpy([2, 2])
    metrics = trainer.evaluate(max_length=4)
    assert [call["max_length"] for call in spy.calls] == [4, 4]
    assert {"eval_a_loss", "eval_b_loss"} <= set(metrics)


def test_prediction_loss_only_does_not_generate(tmp_path):
    """With prediction_loss_only only the loss is computed: generate is not called."""
    trainer = make_trainer(tmp_path, prediction_loss_only=True)
    spy = trainer.model.generate = GenerateSpy([])
    output = trainer.predict(make_data())
    assert spy.calls == [] and output.predictions is None and "test_loss" in output.metrics


def test_without_generation_predictions_are_logits(tmp_path):
    """predict_with_generate=False: the predictions are the model's logits (vocabulary last)."""
    output = make_trainer(tmp_path, predict_with_generate=False).predict(make_data())
    assert output.predictions[0].shape == (7, 5, 128)


def test_generation_config_object_replaces_the_models(tmp_path):
    """generation_config=GenerationConfig(...) is copied onto the model at construction."""
    config = GenerationConfig(max_length=7, decoder_start_token_id=0, pad_token_id=0)
    trainer = make_trainer(tmp_path, generation_config=config)
    assert trainer.model.generation_config.max_length == 7
    assert trainer.model.generation_config is not config


def test_generation_config_is_loaded_from_a_folder(tmp_path):
    """generation_config=<folder> loads the generation_config.json saved there."""
    GenerationConfig(max_length=11, decoder_start_token_id=0).save_pretrained(tmp_path / "gen")
    trainer = make_trainer(tmp_path, generation_config=str(tmp_path / "gen"))
    assert trainer.model.generation_config.max_length == 11


def test_generation_config_as_a_path_trains_and_saves(tmp_path):
    """``--generation_config DIR`` reaches the arguments as a ``pathlib.Path`` (HfArgumentParser): the folder's
    config is loaded, and a checkpoint's training_args.json holds the path as text."""
    import json

    GenerationConfig(max_length=11, decoder_start_token_id=0).save_pretrained(tmp_path / "gen")
    trainer = make_trainer(tmp_path, generation_config=tmp_path / "gen")
    assert trainer.model.generation_config.max_length == 11
    trainer.save_model(str(tmp_path / "saved"))
    saved = json.loads((tmp_path / "saved" / "training_args.json").read_text())
    assert saved["generation_config"] == str(tmp_path / "gen")


def test_invalid_generation_config_names_the_argument(tmp_path):
    """An inconsistent GenerationConfig raises a ValueError naming generation_config."""
    config = GenerationConfig(num_beams=1, early_stopping=True)
    with pytest.raises(ValueError, match=r"Seq2SeqTrainingArguments\(generation_config=...\)"):
        make_trainer(tmp_path, generation_config=config)


def test_generation_during_training(tmp_path):
    """Evaluations during train() generate too; their metrics reach log_history."""
    trainer = make_trainer(
        tmp_path,
        per_device_train_batch_size=2,
        max_steps=2,
        eval_strategy="steps",
        eval_steps=1,
        generation_max_length=4,
    )
    seen = []
    trainer.compute_metrics = lambda p: seen.append(p.predictions.shape) or {"width": p.predictions.shape[1]}
    trainer.train_dataset, trainer.eval_dataset = make_data(4), make_data(5)
    trainer.train()
    assert [e["eval_width"] for e in trainer.state.log_history if "eval_width" in e] == [4, 4]
    assert seen == [(5, 4), (5, 4)]


def test_pad_tensors_to_max_len_uses_the_pad_token(tmp_path):
    """_pad_tensors_to_max_len (transformers' helper) pads on the right with the model's pad token."""
    padded = make_trainer(tmp_path)._pad_tensors_to_max_len(torch.tensor([[5, 6]]), 4)
    assert padded.tolist() == [[5, 6, PAD, PAD]]
