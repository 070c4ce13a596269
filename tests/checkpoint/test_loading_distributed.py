"""Checkpoints loaded through the model's own path with 2 processes (gloo): a LoRA under DDP and FSDP2, a Mixtral
(saved keys converted by transformers) under FSDP2 and DeepSpeed ZeRO-3. For each: a resume in new processes gives
the uninterrupted weights bit for bit on every rank, and load-best gives every rank what the model's class loads
from the best checkpoint (``tests/loading_worker.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests._ddp import run_ranks

WORKER = str(Path(__file__).resolve().parents[1] / "loading_worker.py")
pytestmark = [pytest.mark.slow, pytest.mark.ddp]


def _run(out: Path, kind: str, model: str, run: str, resume: str | None = None) -> list[dict]:
    run_ranks(WORKER, [str(out), kind, model, run, *([resume] if resume else [])], world=2)
    return [torch.load(out / f"{run}_rank{rank}.pt", weights_only=True) for rank in range(2)]


def _reference(model: str, folder: str) -> dict[str, torch.Tensor]:
    """What the model's class loads from ``folder`` in one process: ``PeftModel.from_pretrained`` for the adapter
    files, ``<Class>.from_pretrained`` for a converted model; a sharded (``pytorch_model_fsdp_0``) LoRA folder,
    which neither reads, into a fresh PeftModel."""
    from peft import PeftModel

    from hf_lightning.checkpoint import load_model_weights
    from tests.tiny_loading import converted_model, peft_model, tiny_llama

    if model != "lora":
        return type(converted_model(model)).from_pretrained(folder).state_dict()
    if os.path.isfile(os.path.join(folder, "adapter_config.json")):
        return PeftModel.from_pretrained(tiny_llama(), folder).state_dict()
    fresh = peft_model("lora", seed=5)
    load_model_weights(fresh, folder)
    return fresh.state_dict()


def _assert_same(state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert state.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(state[name], value), name


@pytest.mark.parametrize(
    ("kind", "model"),
    [("ddp", "lora"), ("fsdp", "lora"), ("fsdp_sharded", "lora"), ("fsdp", "mixtral"), ("zero3", "mixtral")],
)
def test_resume_and_best_model_with_two_processes(tmp_path, kind, model):
    """Resumed from checkpoint-2 in new processes: after step 4 the uninterrupted weights and losses on both
    ranks; at the end (load-best) every rank holds exactly what the model's class loads from checkpoint-2."""
    whole = _run(tmp_path, kind, model, "whole")
    checkpoint = tmp_path / "whole" / "checkpoint-2"
    names = set(os.listdir(checkpoint))
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= names
    if model == "lora" and kind != "fsdp_sharded":  # a PeftModel's files, as transformers writes them
        assert {"adapter_model.safetensors", "adapter_config.json"} <= names
        assert not {"model.safetensors", "pytorch_model.bin"} & names
    resumed = _run(tmp_path, kind, model, "resumed", str(checkpoint))
    assert whole[0]["best"].endswith("checkpoint-2") and resumed[0]["best"].endswith("checkpoint-2")
    expected = _reference(model, whole[0]["best"])
    for record in (*whole, *resumed):
        _assert_same(record["last_step"], whole[0]["last_step"])
        _assert_same(record["state"], expected)
    assert resumed[0]["losses"] == whole[0]["losses"]  # steps 1-2 restored from the log, 3-4 trained again
    assert not torch.equal(
        *(torch.cat([t.flatten() for t in s.values()]) for s in (whole[0]["last_step"], expected))
    )
