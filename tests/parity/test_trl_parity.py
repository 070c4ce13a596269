"""TRL's trainers run on hf_lightning as on transformers (``hf_lightning.use_as_transformers_trainer()``).

``tests/trl_worker.py`` trains TRL 1.16's ``SFTTrainer`` (plain and with a LoRA ``peft_config``) and
``DPOTrainer``, ``GRPOTrainer``, ``RewardTrainer`` and ``KTOTrainer`` on a tiny Llama, once with transformers' own classes and once with hf_lightning's bound in
before ``trl`` is imported, each in its own process. Compared here: every logged value (loss, grad norm,
learning rate, TRL's ``entropy`` / ``mean_token_accuracy`` / ``num_tokens``, evaluation metrics) within
1e-5, the checkpoint folders and their file names (hf_lightning adds ``checkpoint-manifest.json`` and
``training_args.json``: docs/divergences.md), the model card, the trained weights; a run resumed from
``checkpoint-3`` is bit-identical to the uninterrupted one, and ``load_best_model_at_end`` loads the best
checkpoint's weights. The DDP tests do the same on 2 processes (gloo), ``total_flos`` included: each rank
gets the whole batches accelerate deals it (docs/data.md), so each rank's padded batches, and the FLOPs
counted from them, are transformers'.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.parity._subclass_runs import (
    assert_best_loaded,
    assert_resume_is_exact,
    assert_same_run,
    result,
    run_worker,
)

pytest.importorskip("trl")
pytest.importorskip("peft")

WORKER = str(Path(__file__).resolve().parents[1] / "trl_worker.py")


# --- one process -----------------------------------------------------------------------------
def test_sft_trainer_trains_as_on_transformers(tmp_path):
    """SFTTrainer: the same losses, TRL metrics, checkpoint files, model card and weights as on transformers."""
    for backend in ("transformers", "hf_lightning"):
        run_worker(WORKER, tmp_path, backend, ["sft"])
    ours = result(tmp_path, "hf_lightning", "sft")
    assert_same_run(result(tmp_path, "transformers", "sft"), ours)
    logged = [e for e in ours["log_history"] if "loss" in e]
    assert len(logged) == 6 and all(
        {"entropy", "mean_token_accuracy", "num_tokens"} <= set(e) for e in logged
    )


SCENARIOS = ["sft", "sft_resume", "sft_best", "lora", "lora_resume", "lora_best", "dpo", "grpo", "reward", "kto",
             "dpo_sync", "rloo", "distill"]  # fmt: skip
SKIP = {name: ("step_time",) for name in ("grpo", "rloo", "distill")}  # they log their wall-clock step time


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    """Every scenario, run by each backend in one process (SFT, its resume and best model; LoRA; DPO)."""
    root = tmp_path_factory.mktemp("trl")
    for backend in ("transformers", "hf_lightning"):
        run_worker(WORKER, root, backend, SCENARIOS)
    return root


@pytest.mark.slow
@pytest.mark.parametrize(
    "scenario",
    ["sft_best", "lora", "lora_best", "dpo", "grpo", "reward", "kto", "dpo_sync", "rloo", "distill"],
)
def test_trl_run_matches_transformers(one_process, scenario):
    """LoRA SFT, the best model loaded at the end, DPO (with a synced reference model too), GRPO, the reward
    model, KTO, RLOO, distillation: as on transformers."""
    assert_same_run(
        result(one_process, "transformers", scenario),
        result(one_process, "hf_lightning", scenario),
        SKIP.get(scenario, ()),
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sft", "lora"])
def test_trl_resume_matches_transformers_and_is_exact(one_process, name):
    """Resuming checkpoint-3 logs what transformers' resumed run logs and ends bit-identical to the whole run."""
    resumed = result(one_process, "hf_lightning", f"{name}_resume")
    assert_same_run(result(one_process, "transformers", f"{name}_resume"), resumed)
    assert_resume_is_exact(result(one_process, "hf_lightning", name), resumed)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sft_best", "lora_best"])
def test_trl_load_best_model_at_end(one_process, name):
    """``load_best_model_at_end`` ends with the best checkpoint's weights (checkpoint-3: the higher eval loss)."""
    assert_best_loaded(result(one_process, "hf_lightning", name))


# --- two processes (gloo DDP) -----------------------------------------------------------------
DDP_SCENARIOS = ["sft", "sft_resume", "lora", "lora_resume", "dpo", "grpo", "rloo", "distill"]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("trl-ddp")
    for backend in ("transformers", "hf_lightning"):
        run_worker(WORKER, root, backend, DDP_SCENARIOS, world=2)
    return root


@pytest.mark.slow
@pytest.mark.ddp
@pytest.mark.parametrize("scenario", DDP_SCENARIOS)
def test_trl_ddp_matches_transformers(two_processes, scenario):
    """On 2 processes: the same logged values (total_flos too), files and weights."""
    theirs, ours = (
        result(two_processes, "transformers", scenario),
        result(two_processes, "hf_lightning", scenario),
    )
    assert_same_run(theirs, ours, SKIP.get(scenario, ()))


@pytest.mark.slow
@pytest.mark.ddp
@pytest.mark.parametrize("name", ["sft", "lora"])
def test_trl_ddp_resume_is_exact(two_processes, name):
    """On 2 processes a run resumed from checkpoint-3 ends bit-identical to the uninterrupted one."""
    assert_resume_is_exact(
        result(two_processes, "hf_lightning", name), result(two_processes, "hf_lightning", f"{name}_resume")
    )
