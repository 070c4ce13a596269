"""The step's speed tricks (``adapters/speedups.py``): each can be turned off, and on or off the module
trains to the same numbers."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from hf_lightning.adapters import speedups
from hf_lightning.adapters.module import HFModule

_TRAIN = r"""
import json, torch
torch.set_num_threads(1)
import lightning as L
from transformers import GPT2Config, GPT2LMHeadModel
from hf_lightning import TrainingArguments
from hf_lightning.adapters import HFModule
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=40, n_positions=16))
rows = [{"input_ids": torch.arange(8) % 40 + i, "labels": torch.arange(8) % 40 + i} for i in range(8)]
loader = torch.utils.data.DataLoader(rows, batch_size=4)
args = TrainingArguments("out", use_cpu=True, report_to="none", max_steps=3, learning_rate=1e-2)
module = HFModule(model, args)
L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
          enable_model_summary=False, accelerator="cpu", devices=1).fit(module, loader)
print(json.dumps({"on": sorted(HFModule.speedups), "sum": float(sum(p.double().sum() for p in model.parameters()))}))
"""


def _train(tmp_path, off: str) -> dict:
    import json

    env = {**__import__("os").environ, speedups.OFF_ENV: off}
    done = subprocess.run(
        [sys.executable, "-c", _TRAIN], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_trick_is_on_by_default() -> None:
    assert HFModule.speedups == frozenset(speedups.SPEEDUPS)


def test_turning_the_tricks_off_changes_no_number(tmp_path) -> None:
    """With all three off (Lightning's generic paths), the same weights after 3 steps, bit for bit."""
    on, off = _train(tmp_path, ""), _train(tmp_path, ",".join(speedups.SPEEDUPS))
    assert on["on"] == sorted(speedups.SPEEDUPS) and off["on"] == []
    assert on["sum"] == off["sum"]


def test_an_unknown_trick_is_refused_by_name() -> None:
    class Module(torch.nn.Module):
        def training_step(self, batch):
            return batch

    with pytest.raises(ValueError, match=r"names no speed trick: \['fast'\]; choose from"):
        speedups.install(Module, off="fast")
