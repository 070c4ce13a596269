"""Checkpoints under FSDP2 and FSDP1 (2 gloo processes): both ``state_dict_type`` layouts, resume, the best
model, a kill.

The runs are ``tests/fsdp_checkpoint_worker.py``: a tiny GPT-2, AdamW, a linear schedule, 4 optimizer
steps with GA 2 and a checkpoint every 2 steps. The kinds ``full``/``sharded`` run FSDP2, ``full1``/
``sharded1`` FSDP1.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch

from hf_lightning.checkpoint import find_resumable_checkpoint, is_checkpoint_complete, load_model_weights
from hf_lightning.checkpoint.leftovers import find_leftovers, remove_leftovers
from tests._ddp import run_ranks
from tests.fsdp_checkpoint_worker import run_kind, whole_and_resumed
from tests.tiny import causal_lm_data, tiny_gpt2

WORKER = "tests/fsdp_checkpoint_worker.py"
KINDS = ("full", "sharded", "full1", "sharded1")
pytestmark = [pytest.mark.slow, pytest.mark.ddp]


def _assert_same_weights(
    first: dict[str, torch.Tensor], second: dict[str, torch.Tensor], atol: float = 0
) -> None:
    assert first.keys() == second.keys()
    for name, value in first.items():
        torch.testing.assert_close(second[name], value, rtol=0, atol=atol, msg=name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Per kind: the uninterrupted run and the run resumed from its checkpoint-2 by new processes."""
    return whole_and_resumed(tmp_path_factory.mktemp("fsdp_ckpt"), KINDS)


@pytest.mark.parametrize("kind", ["full", "full1"])
def test_full_state_dict_checkpoint_is_the_single_process_layout(runs, kind: str) -> None:
    """FULL_STATE_DICT: ``model.safetensors`` and an index-keyed ``optimizer.pt``, rank files of both ranks."""
    folder = runs["out"] / f"{kind}_whole" / "checkpoint-2"
    names = set(os.listdir(folder))
    assert {"model.safetensors", "config.json", "optimizer.pt", "scheduler.pt", "trainer_state.json"} <= names
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= names
    assert not names & {"pytorch_model_fsdp_0", "optimizer_0"}
    optimizer = torch.load(folder / "optimizer.pt", weights_only=True)
    model = tiny_gpt2()
    count = len(list(model.parameters()))
    assert sorted(optimizer["state"]) == list(range(count))  # every parameter's full state, by index
    first = optimizer["state"][0]["exp_avg"]
    assert first.shape == next(model.parameters()).shape and first.abs().sum() > 0


@pytest.mark.parametrize("kind", ["sharded", "sharded1"])
def test_sharded_state_dict_checkpoint_has_transformers_folders(runs, kind: str) -> None:
    """SHARDED_STATE_DICT: ``pytorch_model_fsdp_0/`` and ``optimizer_0/``, one shard file per rank."""
    folder = runs["out"] / f"{kind}_whole" / "checkpoint-2"
    names = set(os.listdir(folder))
    assert {
        "pytorch_model_fsdp_0",
        "optimizer_0",
        "scheduler.pt",
        "trainer_state.json",
        "config.json",
    } <= names
    assert not names & {"model.safetensors", "optimizer.pt"}
    for sub in ("pytorch_model_fsdp_0", "optimizer_0"):
        assert sorted(os.listdir(folder / sub)) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    manifest = json.loads((folder / "checkpoint-manifest.json").read_text())
    listed = json.dumps(manifest)
    assert "pytorch_model_fsdp_0/__1_0.distcp" in listed  # the shards are checksummed too
    assert is_checkpoint_complete(folder)


@pytest.mark.parametrize("kind", KINDS)
def test_resume_in_new_processes_gives_the_uninterrupted_weights(runs, kind: str) -> None:
    """Resumed at step 2 by new processes, the run ends with the uninterrupted run's weights and losses."""
    whole, resumed = runs[kind], runs[f"{kind}_resumed"]
    for rank in range(2):
        _assert_same_weights(whole[rank]["state"], resumed[rank]["state"])
    assert resumed[0]["losses"] == whole[0]["losses"]
    assert [e["step"] for e in resumed[0]["log_history"] if "loss" in e] == [1, 2, 3, 4]


def test_both_layouts_and_versions_train_alike(runs) -> None:
    """The layout changes what is written, not what is trained; FSDP1 trains as FSDP2 does (float noise)."""
    _assert_same_weights(runs["full"][0]["state"], runs["sharded"][0]["state"])
    _assert_same_weights(runs["full1"][0]["state"], runs["sharded1"][0]["state"])
    # FSDP1 reduces flat buffers, FSDP2 each parameter: the summation order differs, and Adam's normalised
    # steps turn that float noise into weight differences of a few 1e-6 after 4 steps (7.3e-6 seen on CPU)
    _assert_same_weights(runs["full"][0]["state"], runs["full1"][0]["state"], atol=5e-5)


@pytest.mark.parametrize("kind", ["sharded", "sharded1"])
def test_sharded_checkpoint_loads_in_one_process(runs, kind: str) -> None:
    """A sharded checkpoint's weights load into an unsharded model in a plain process (no process group)."""
    model = tiny_gpt2(seed=9)
    load_model_weights(model, runs["out"] / f"{kind}_whole" / "checkpoint-4")
    _assert_same_weights(runs[kind][0]["state"], dict(model.state_dict()))


@pytest.mark.parametrize("kind", ["full", "full1"])
def test_full_checkpoint_loads_with_from_pretrained(runs, kind: str) -> None:
    """transformers' ``from_pretrained`` loads the checkpoint folder written under FSDP."""
    from transformers import GPT2LMHeadModel

    loaded = GPT2LMHeadModel.from_pretrained(runs["out"] / f"{kind}_whole" / "checkpoint-4")
    _assert_same_weights(runs[kind][0]["state"], dict(loaded.state_dict()))


def _one_process_args(cls: type, out: Path) -> Any:
    return cls(str(out), use_cpu=True, report_to="none", disable_tqdm=True, seed=3, per_device_train_batch_size=2,
               gradient_accumulation_steps=2, max_steps=4, learning_rate=0.01, lr_scheduler_type="linear",
               logging_steps=1, save_strategy="no")  # fmt: skip


@pytest.mark.parametrize("kind", ["full", "full1"])
def test_full_checkpoint_resumes_in_one_process_as_transformers_resumes_it(
    runs, tmp_path, caplog, kind
) -> None:
    """The FULL_STATE_DICT checkpoint resumes without FSDP, optimizer included, to transformers' weights."""
    import transformers

    import hf_lightning

    checkpoint = str(runs["out"] / f"{kind}_whole" / "checkpoint-2")
    data = causal_lm_data(n=32, seed=5)
    results = []
    for module in (hf_lightning, transformers):
        model = tiny_gpt2(dropout=0.0)
        args = _one_process_args(module.TrainingArguments, tmp_path / module.__name__)
        trainer = module.Trainer(model=model, args=args, train_dataset=data)
        with caplog.at_level(logging.WARNING):
            trainer.train(resume_from_checkpoint=checkpoint)
        assert trainer.state.global_step == 4
        results.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    assert "the optimizer starts fresh" not in caplog.text
    _assert_same_weights(results[1], results[0], atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_load_best_model_at_end_under_fsdp(tmp_path, kind: str) -> None:
    """The model at the end holds the best checkpoint's weights (here the step-2 one), on every rank."""
    records = run_kind(tmp_path, kind, "best")
    best = records[0]["best"]
    assert best is not None and best.endswith("checkpoint-2")
    expected = tiny_gpt2(seed=9)
    load_model_weights(expected, best)
    later = tiny_gpt2(seed=9)
    load_model_weights(later, tmp_path / "best" / "checkpoint-4")
    for record in records:
        _assert_same_weights(dict(expected.state_dict()), record["state"])
    assert not torch.equal(later.state_dict()["lm_head.weight"], records[0]["state"]["lm_head.weight"])


def test_sigkill_of_one_rank_during_a_sharded_save_leaves_no_complete_folder(tmp_path) -> None:
    """Rank 1 killed while writing its shard of step 4: no ``checkpoint-4``; the resumable one is step 2."""
    results = run_ranks(WORKER, [str(tmp_path), "sharded", "kill"], world=2, check=False)
    assert results[1][0] == -signal.SIGKILL, results[1][1][-2000:]
    assert results[0][0] != 0  # rank 0 fails in the save's collective instead of publishing
    run_dir = tmp_path / "kill"
    assert not (run_dir / "checkpoint-4").exists()
    staging = run_dir / ".tmp-checkpoint-4"
    assert not (staging / "checkpoint-is-incomplete.txt").exists()  # rank 0's failed save removed its staging
    remove_leftovers(run_dir)  # what the next train() does first, had some of it stayed
    assert find_leftovers(run_dir) == []
    assert find_resumable_checkpoint(run_dir) == str(run_dir / "checkpoint-2")
