"""Checkpoints under DeepSpeed ZeRO-2 and ZeRO-3 (2 gloo processes): transformers' layout, resume, best model.

The runs are ``tests/fsdp_checkpoint_worker.py`` with kinds ``zero2``/``zero3``: a tiny GPT-2, AdamW, a
linear schedule, 4 optimizer steps with GA 2 and a checkpoint every 2 steps; ``zero2s`` takes the
optimizer (AdamW) and the schedule (DeepSpeed's WarmupDecayLR) from the configuration's sections.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from hf_lightning.checkpoint import load_model_weights
from tests.fsdp_checkpoint_worker import run_kind, whole_and_resumed
from tests.tiny import tiny_gpt2

KINDS = ("zero2", "zero3", "zero2s")
pytestmark = [pytest.mark.slow, pytest.mark.ddp]


def _assert_same_weights(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> None:
    assert first.keys() == second.keys()
    for name, value in first.items():
        torch.testing.assert_close(second[name], value, rtol=0, atol=0, msg=name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Per kind: the uninterrupted run and the run resumed from its checkpoint-2 by new processes."""
    return whole_and_resumed(tmp_path_factory.mktemp("deepspeed_ckpt"), KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_has_transformers_deepspeed_layout(runs, kind: str) -> None:
    """The engine's ``global_step2/`` (one optimizer partition per rank), ``latest``, full weights beside it,
    the Trainer's scheduler and RNG files, and no ``optimizer.pt`` (the state is DeepSpeed's)."""
    folder = runs["out"] / f"{kind}_whole" / "checkpoint-2"
    names = set(os.listdir(folder))
    assert {"global_step2", "latest", "model.safetensors", "scheduler.pt", "trainer_state.json"} <= names
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= names and "optimizer.pt" not in names
    assert (folder / "latest").read_text().strip() == "global_step2"
    inner = set(os.listdir(folder / "global_step2"))
    assert {f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt" for rank in range(2)} <= inner


@pytest.mark.parametrize("kind", KINDS)
def test_resume_in_new_processes_gives_the_uninterrupted_weights(runs, kind: str) -> None:
    """Resumed at step 2 by new processes (the engine reads its optimizer partitions), the run ends with the
    uninterrupted run's weights and losses exactly."""
    whole, resumed = runs[kind], runs[f"{kind}_resumed"]
    for rank in range(2):
        _assert_same_weights(whole[rank]["state"], resumed[rank]["state"])
    assert resumed[0]["losses"] == whole[0]["losses"]
    assert [e["step"] for e in resumed[0]["log_history"] if "loss" in e] == [1, 2, 3, 4]
    rates = [[e["learning_rate"] for e in run[0]["log_history"] if "loss" in e] for run in (whole, resumed)]
    assert rates[0] == rates[1]  # the schedule resumes where it was (scheduler.pt)


@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_weights_load_with_from_pretrained(runs, kind: str) -> None:
    """The full weights in ``checkpoint-4`` (gathered under ZeRO-3) are the trained model's."""
    from transformers import GPT2LMHeadModel

    loaded = GPT2LMHeadModel.from_pretrained(runs["out"] / f"{kind}_whole" / "checkpoint-4")
    _assert_same_weights(runs[kind][0]["state"], dict(loaded.state_dict()))


def test_load_best_model_at_end_under_zero3(tmp_path) -> None:
    """The partitioned model at the end holds the best checkpoint's weights (step 2, not the last), on every rank."""
    records = run_kind(tmp_path, "zero3", "best")
    best = records[0]["best"]
    assert best is not None and best.endswith("checkpoint-2")
    expected, later = tiny_gpt2(seed=9), tiny_gpt2(seed=9)
    load_model_weights(expected, best)
    load_model_weights(later, tmp_path / "best" / "checkpoint-4")
    for record in records:
        _assert_same_weights(dict(expected.state_dict()), record["state"])
    assert not torch.equal(later.state_dict()["lm_head.weight"], records[0]["state"]["lm_head.weight"])
