"""The log lines of a checkpoint save name ``checkpoint-N`` as transformers' do, though hf_lightning writes
the folder as ``.tmp-checkpoint-N`` and renames it when complete (``checkpoint/log_paths.py``); the
dropped-columns line is transformers' too."""

from __future__ import annotations

import logging
import os

import torch
import transformers
from datasets import Dataset

import hf_lightning


def _lines(mod, out, caplog) -> list[str]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32))
    rows = [{"input_ids": [i + 1, 2, 3, 4], "labels": [i + 1, 2, 3, 4], "extra": "x"} for i in range(8)]
    args = mod.TrainingArguments(str(out), per_device_train_batch_size=4, max_steps=2, save_steps=1,
                                 report_to="none", use_cpu=True, disable_tqdm=True)  # fmt: skip
    trainer = mod.Trainer(model=model, args=args, train_dataset=Dataset.from_list(rows))
    caplog.clear()
    with caplog.at_level(logging.INFO):
        trainer.train()
    return [r.getMessage().replace(str(out), "OUT") for r in caplog.records]


def _both_at_info(run, tmp_path, caplog) -> tuple:
    """``run(library, out, caplog)`` for transformers then hf_lightning, transformers' verbosity at INFO."""
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_info()
    try:
        return run(transformers, tmp_path / "hf", caplog), run(hf_lightning, tmp_path / "hl", caplog)
    finally:
        transformers.logging.set_verbosity(verbosity)


def test_save_and_column_lines_are_transformers(tmp_path, caplog):
    theirs, ours = _both_at_info(_lines, tmp_path, caplog)
    assert not [line for line in ours if ".tmp-checkpoint" in line]

    def picked(lines: list[str]) -> list[str]:
        return [line for line in lines if "saved in" in line or "Saving model checkpoint" in line
                or "don't have a corresponding argument" in line]  # fmt: skip

    assert "Model weights saved in OUT/checkpoint-2/model.safetensors" in picked(ours)
    assert picked(ours) == picked(theirs)


def _collator_tokenizer_lines(mod, out, caplog) -> tuple[list[str], list[str]]:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import DataCollatorWithPadding, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i + 2 for i in range(8)}}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="[UNK]")),
                                        pad_token="[PAD]", unk_token="[UNK]")  # fmt: skip
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=32))
    args = mod.TrainingArguments(str(out), report_to="none", use_cpu=True, disable_tqdm=True)
    trainer = mod.Trainer(model=model, args=args, data_collator=DataCollatorWithPadding(tokenizer))
    caplog.clear()
    with caplog.at_level(logging.INFO):
        trainer.save_model()
    return [r.getMessage() for r in caplog.records if "data_collator.tokenizer" in r.getMessage()], sorted(
        name for name in os.listdir(out) if "token" in name
    )


def test_saving_the_collators_tokenizer_is_announced_as_transformers(tmp_path, caplog):
    """No processing_class: the data collator's tokenizer is saved, with transformers' INFO line."""
    theirs, ours = _both_at_info(_collator_tokenizer_lines, tmp_path, caplog)
    assert len(theirs[0]) == 1 and theirs[1]
    assert ours == theirs
