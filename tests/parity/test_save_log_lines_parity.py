"""The log lines of a checkpoint save name ``checkpoint-N`` as transformers' do, though hf_lightning writes
the folder as ``.tmp-checkpoint-N`` and renames it when complete (``checkpoint/log_paths.py``); the
dropped-columns line is transformers' too."""

from __future__ import annotations

import logging

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


def test_save_and_column_lines_are_transformers(tmp_path, caplog):
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_info()
    try:
        theirs = _lines(transformers, tmp_path / "hf", caplog)
        ours = _lines(hf_lightning, tmp_path / "hl", caplog)
    finally:
        transformers.logging.set_verbosity(verbosity)
    assert not [line for line in ours if ".tmp-checkpoint" in line]

    def picked(lines: list[str]) -> list[str]:
        return [line for line in lines if "saved in" in line or "Saving model checkpoint" in line
                or "don't have a corresponding argument" in line]  # fmt: skip

    assert "Model weights saved in OUT/checkpoint-2/model.safetensors" in picked(ours)
    assert picked(ours) == picked(theirs)
