"""Mixed precision on the CPU as under transformers: ``fp16=True`` trains in 32 bits there (accelerate turns fp16
mixed precision off on the CPU: no autocast, no gradient scaler), ``bf16=True`` autocasts to bfloat16."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

import hf_lightning


class _Data(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict:
        x = torch.tensor([i / 10 + 0.0123])
        return {"x": x, "labels": x / 3}


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(1, 1)
        self.autocast: list[tuple[bool, torch.dtype]] = []

    def forward(self, x, labels):
        self.autocast.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return {"loss": nn.functional.mse_loss(self.linear(x).float(), labels)}


def _run(library, tmp_path, flag: str) -> dict:
    torch.manual_seed(0)
    model = _Model()
    args = library.TrainingArguments(
        output_dir=str(tmp_path / library.__name__),
        use_cpu=True,
        per_device_train_batch_size=2,
        max_steps=3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        **{flag: True},
    )
    trainer = library.Trainer(model=model, args=args, train_dataset=_Data())
    trainer.train()
    with trainer.accelerator.autocast():  # outside training: what a subclass's own forward pass gets
        outside = torch.is_autocast_enabled("cpu")
    return {
        "autocast": model.autocast[0][0],
        "dtype": model.autocast[0][1] if model.autocast[0][0] else None,
        "outside": outside,
        "scaler": trainer.accelerator.scaler is not None,
        "mixed_precision": trainer.accelerator.mixed_precision,
        "logs": [(e["loss"], e["grad_norm"]) for e in trainer.state.log_history if "loss" in e],
        "weight": model.linear.weight.item(),
    }


@pytest.mark.parametrize(("flag", "autocast"), [("fp16", False), ("bf16", True)])
def test_mixed_precision_on_the_cpu_is_transformers(tmp_path, flag, autocast):
    theirs, ours = _run(transformers, tmp_path, flag), _run(hf_lightning, tmp_path, flag)
    assert theirs["autocast"] is autocast and theirs["outside"] is autocast
    for key in ("autocast", "dtype", "outside", "scaler", "mixed_precision"):
        assert ours[key] == theirs[key], key
    if flag == "fp16":  # 32 bits on both sides: the same numbers
        assert ours["logs"] == theirs["logs"] and ours["weight"] == theirs["weight"]
    else:
        flat = [v for entry in ours["logs"] for v in entry]
        assert flat == pytest.approx([v for entry in theirs["logs"] for v in entry], rel=1e-3)
