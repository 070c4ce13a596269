"""``TrainingArguments(debug="underflow_overflow")`` as on transformers (``hf_lightning/debug_utils.py``): a
model whose activations turn inf stops the run with the same ``ValueError`` after printing the last frames
(module names, abs min / max of parameters, inputs and outputs); a healthy model trains and logs the same."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

import hf_lightning
from hf_lightning.debug_utils import DebugUnderflowOverflow


class Blowup(nn.Module):
    """A regression model whose hidden layer overflows once the input is scaled by ``scale``."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.hidden, self.head, self.scale = nn.Linear(1, 4), nn.Linear(4, 1), scale

    def forward(self, input_x, labels=None):
        y = self.head(torch.relu(self.hidden(input_x * self.scale)))
        loss = nn.functional.mse_loss(y.squeeze(-1), labels) if labels is not None else None
        return {"loss": loss, "logits": y}


def _run(lib, out, scale: float, capsys):
    rows = [{"input_x": torch.tensor([float(i)]), "labels": torch.tensor(float(i))} for i in range(1, 9)]
    args = lib.TrainingArguments(str(out), max_steps=2, per_device_train_batch_size=4, logging_steps=1,
                                 report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True,
                                 debug="underflow_overflow")  # fmt: skip
    trainer = lib.Trainer(model=Blowup(scale), args=args, train_dataset=rows)
    capsys.readouterr()
    try:
        trainer.train()
        error = None
    except ValueError as exc:
        error = str(exc)
    printed = capsys.readouterr().out
    return error, printed, [e.get("loss") for e in trainer.state.log_history if "loss" in e]


def test_an_overflow_stops_the_run_with_the_frames(tmp_path, capsys):
    theirs = _run(transformers, tmp_path / "hf", 1e38, capsys)
    ours = _run(hf_lightning, tmp_path / "hl", 1e38, capsys)
    assert ours[0] == theirs[0] and ours[0].startswith("DebugUnderflowOverflow: inf/nan detected")
    for printed in (theirs[1], ours[1]):
        assert "Detected inf/nan during batch_number=0" in printed
        assert "hidden Linear" in printed and "output has infs" in printed


def test_a_healthy_model_trains_as_without_it(tmp_path, capsys):
    theirs = _run(transformers, tmp_path / "hf", 1.0, capsys)
    ours = _run(hf_lightning, tmp_path / "hl", 1.0, capsys)
    assert ours[0] is None and theirs[0] is None and "Detected" not in ours[1]
    assert ours[2] == pytest.approx(theirs[2], abs=1e-6) and len(ours[2]) == 2


def test_trace_and_abort_after_batch(capsys):
    model = Blowup(1.0)
    debug = DebugUnderflowOverflow(model, trace_batch_nums=[1], abort_after_batch_num=1)
    model(torch.ones(2, 1))
    assert "Starting batch number=1" not in capsys.readouterr().out  # batch 0 is not traced
    with pytest.raises(ValueError, match="aborting after 2 batches due to `abort_after_batch_num=1`"):
        model(torch.ones(2, 1))
    traced = capsys.readouterr().out
    assert "*** Starting batch number=1 ***" in traced and " hidden Linear" in traced and "output" in traced
    debug.remove()
    model(torch.ones(2, 1))  # no hooks left
