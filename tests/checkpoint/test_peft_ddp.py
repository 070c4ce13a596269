"""LoRA under 2-process DDP (gloo): adapter checkpoints in transformers' layout, a resume in new processes equal
to the uninterrupted run, and the best adapter loaded on every rank (``tests/peft_ddp_worker.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests._ddp import run_ranks

WORKER = str(Path(__file__).resolve().parents[1] / "peft_ddp_worker.py")
pytestmark = [pytest.mark.slow, pytest.mark.ddp]


def _run(out: Path, run: str, resume: str | None = None) -> list[dict]:
    run_ranks(WORKER, [str(out), run, *([resume] if resume else [])], world=2)
    return [torch.load(out / f"{run}_rank{rank}.pt", weights_only=True) for rank in range(2)]


def test_lora_checkpoints_resume_and_best_model_under_ddp(tmp_path):
    """Adapter files and both ranks' RNG files in each checkpoint; resume from checkpoint-2 gives the
    uninterrupted weights on both ranks; load-best gives every rank ``PeftModel.from_pretrained(best)``."""
    from peft import PeftModel

    from tests.tiny_loading import tiny_llama

    whole = _run(tmp_path, "whole")
    names = set(os.listdir(tmp_path / "whole" / "checkpoint-2"))
    assert {"adapter_model.safetensors", "adapter_config.json", "rng_state_0.pth", "rng_state_1.pth"} <= names
    assert not {"model.safetensors", "pytorch_model.bin"} & names
    resumed = _run(tmp_path, "resumed", str(tmp_path / "whole" / "checkpoint-2"))
    for record in (*whole, *resumed):
        for name, value in whole[0]["state"].items():
            assert torch.equal(record["state"][name], value), name
    assert resumed[0]["losses"] == whole[0]["losses"]  # the log of steps 1-2 restored, 3-4 logged again
    best = _run(tmp_path, "best")
    assert best[0]["best"].endswith("checkpoint-2")
    expected = PeftModel.from_pretrained(tiny_llama(), best[0]["best"]).state_dict()
    for record in best:
        for name, value in expected.items():
            assert torch.equal(record["state"][name], value), name
