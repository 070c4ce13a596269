"""``DataCollatorWithPadding`` and ``DefaultDataCollator`` are dataclasses as transformers' are: same fields, equality, ``dataclasses.replace``,
``repr``, and a ``@dataclass`` subclass adding a field pads as the base does."""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("transformers")

import transformers  # noqa: E402

import hf_lightning  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i + 2 for i in range(8)}}
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="[UNK]")), pad_token="[PAD]", unk_token="[UNK]"
    )


FEATURES = [{"input_ids": [2, 3, 4], "label": 1}, {"input_ids": [5], "label": 0}]


def _observed(lib, tokenizer):
    collator = lib.DataCollatorWithPadding(tokenizer, pad_to_multiple_of=4)
    changed = dataclasses.replace(collator, padding="max_length", max_length=6)

    @dataclasses.dataclass
    class WithExtra(lib.DataCollatorWithPadding):
        extra: int = 0

        def __call__(self, features):
            batch = super().__call__(features)
            batch["extra"] = self.extra
            return batch

    sub = WithExtra(tokenizer, extra=7)
    return {
        "fields": [f.name for f in dataclasses.fields(collator)],
        "equal": collator == lib.DataCollatorWithPadding(tokenizer, pad_to_multiple_of=4),
        "repr": repr(collator).split("(", 1)[1],
        "replaced": {k: v.tolist() for k, v in changed(FEATURES).items()},
        "sub": {k: v if isinstance(v, int) else v.tolist() for k, v in sub(FEATURES).items()},
        "sub_fields": [f.name for f in dataclasses.fields(sub)],
    }


def test_padding_collator_is_the_same_dataclass(tokenizer):
    assert _observed(hf_lightning, tokenizer) == _observed(transformers, tokenizer)


def test_default_collator_is_the_same_dataclass():
    def observed(lib):
        collator = lib.DefaultDataCollator(return_tensors="np")
        return (
            [f.name for f in dataclasses.fields(collator)],
            collator == lib.DefaultDataCollator("np"),
            repr(collator).split("(", 1)[1],
            dataclasses.replace(collator, return_tensors="pt")([{"x": [1, 2], "label": 1}])[
                "labels"
            ].tolist(),
        )

    assert observed(hf_lightning) == observed(transformers)


class _Pixels(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(3 * 8 * 8, 2)

    def forward(self, pixel_values, labels=None):
        logits = self.lin(pixel_values.flatten(1))
        return torch.nn.functional.cross_entropy(logits, labels), logits


def _processors(tokenizer):
    from transformers import ViTImageProcessor, Wav2Vec2FeatureExtractor

    return {
        "tokenizer": tokenizer,
        "image processor": ViTImageProcessor(),
        "sequence feature extractor": Wav2Vec2FeatureExtractor(),
    }


def test_the_default_collator_follows_transformers_choice(tokenizer, tmp_path):
    """No ``data_collator``: padding for a tokenizer or a sequence feature extractor, ``default_data_collator``
    for anything else (an image processor has a ``pad`` too, but transformers stacks its outputs)."""
    for name, processing_class in _processors(tokenizer).items():
        chosen = []
        for lib in (transformers, hf_lightning):
            args = lib.TrainingArguments(str(tmp_path / lib.__name__), report_to="none", use_cpu=True)
            trainer = lib.Trainer(model=_Pixels(), args=args, processing_class=processing_class)
            chosen.append(
                type(trainer.data_collator).__name__ + getattr(trainer.data_collator, "__name__", "")
            )
        assert chosen[1] == chosen[0], name


def test_an_image_processor_without_a_collator_trains_as_in_transformers(tmp_path):
    """pixel_values + labels, ``processing_class=ViTImageProcessor()``, no collator: the same losses (the
    padding collator, picked before, failed at the first batch)."""
    from transformers import ViTImageProcessor

    g = torch.Generator().manual_seed(0)
    data = [{"pixel_values": torch.randn(3, 8, 8, generator=g), "labels": i % 2} for i in range(8)]
    losses = []
    for lib in (transformers, hf_lightning):
        args = lib.TrainingArguments(
            str(tmp_path / lib.__name__), max_steps=2, per_device_train_batch_size=4, report_to="none",
            use_cpu=True, disable_tqdm=True, save_strategy="no", logging_steps=1,
        )  # fmt: skip
        trainer = lib.Trainer(
            model=_Pixels(), args=args, train_dataset=data, processing_class=ViTImageProcessor()
        )
        trainer.train()
        losses.append([h["loss"] for h in trainer.state.log_history if "loss" in h])
    assert losses[1] == pytest.approx(losses[0], rel=1e-6)
