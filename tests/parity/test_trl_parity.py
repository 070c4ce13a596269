"""TRL's trainers run on hf_lightning as on transformers (``hf_lightning.use_as_transformers_trainer()``).

``tests/trl_worker.py`` trains TRL 1.16's ``SFTTrainer`` (plain and with a LoRA ``peft_config``) and
``DPOTrainer`` on a tiny Llama, once with transformers' own classes and once with hf_lightning's bound in
before ``trl`` is imported, each in its own process. Compared here: every logged value (loss, grad norm,
learning rate, TRL's ``entropy`` / ``mean_token_accuracy`` / ``num_tokens``, evaluation metrics) within
1e-5, the checkpoint folders and their file names (hf_lightning adds ``checkpoint-manifest.json`` and
``training_args.json``: docs/divergences.md), the model card, the trained weights; a run resumed from
``checkpoint-3`` is bit-identical to the uninterrupted one, and ``load_best_model_at_end`` loads the best
checkpoint's weights. The DDP tests do the same on 2 processes (gloo).

Under DDP ``total_flos`` is left out: each rank counts its own padded batches, and hf_lightning deals a
step's samples to the ranks by torch's ``DistributedSampler`` rule where accelerate deals whole batches
(docs/data.md), so the padding (and only it) differs; the step's samples, losses and weights are the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests._ddp import run_ranks

pytest.importorskip("trl")
pytest.importorskip("peft")

WORKER = str(Path(__file__).resolve().parents[1] / "trl_worker.py")
ROOT = str(Path(__file__).resolve().parents[2])
OURS_ONLY = {"checkpoint-manifest.json", "training_args.json"}  # docs/divergences.md
TIMING = ("_runtime", "_per_second")


def run_worker(root: Path, backend: str, scenarios: list[str], world: int = 1) -> None:
    """Run the worker for ``backend`` on ``world`` processes (a scenario that raises records its traceback)."""
    if world > 1:
        run_ranks(WORKER, [backend, str(root), *scenarios], world=world, timeout=1500)
        return
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, WORKER, backend, str(root), *scenarios],
        env=env, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def result(root: Path, backend: str, scenario: str) -> dict:
    """What the worker recorded for ``scenario``; fails with the scenario's traceback if it raised."""
    folder = root / backend / scenario
    found = json.loads((folder / f"{scenario}.json").read_text(encoding="utf-8"))
    assert "error" not in found, f"{backend} {scenario} raised:\n{found['error']}"
    found["weights"] = load_file(str(folder / f"{scenario}.safetensors"))
    found["folder"] = folder
    return found


def assert_same_logs(theirs: list[dict], ours: list[dict], skip: tuple[str, ...] = ()) -> None:
    """The same entries, keys and values (timings aside) within 1e-5."""
    assert [e.get("step") for e in ours] == [e.get("step") for e in theirs]
    for a, b in zip(theirs, ours):
        keys = {k for k in a if not k.endswith(TIMING) and k not in skip}
        assert keys == {k for k in b if not k.endswith(TIMING) and k not in skip}, (a, b)
        for key in sorted(keys):
            if isinstance(a[key], float):
                torch.testing.assert_close(
                    b[key], a[key], rtol=1e-5, atol=1e-5, msg=f"{key} at step {a['step']}"
                )
            else:
                assert b[key] == a[key], (key, a.get("step"))


def assert_same_run(theirs: dict, ours: dict, skip: tuple[str, ...] = ()) -> None:
    assert_same_logs(theirs["log_history"], ours["log_history"], skip)
    assert sorted(ours["files"]) == sorted(theirs["files"])  # checkpoint-3, checkpoint-6
    for folder, names in theirs["files"].items():
        assert set(ours["files"][folder]) - OURS_ONLY == set(names), folder
    assert ours["card"] == theirs["card"]  # tags, metadata and text of README.md
    assert ours["weights"].keys() == theirs["weights"].keys()
    for name, weight in theirs["weights"].items():
        torch.testing.assert_close(ours["weights"][name], weight, rtol=1e-5, atol=1e-5, msg=name)


def assert_resume_is_exact(whole: dict, resumed: dict) -> None:
    """The resumed run logs steps 4-6 and ends with the weights of the uninterrupted one, bit for bit."""
    keep = ("loss", "grad_norm", "learning_rate", "entropy", "mean_token_accuracy")
    after = [{k: e[k] for k in keep} for e in whole["log_history"] if e.get("step", 0) > 3 and "loss" in e]
    again = [{k: e[k] for k in keep} for e in resumed["log_history"] if e.get("step", 0) > 3 and "loss" in e]
    assert again == after and len(after) == 3
    for name, weight in whole["weights"].items():
        assert torch.equal(resumed["weights"][name], weight), name


def assert_best_loaded(result: dict) -> None:
    """The model at the end holds ``checkpoint-3``'s weights (the best by the higher eval loss)."""
    assert Path(result["best_model_checkpoint"]).name == "checkpoint-3"
    folder = result["folder"] / "checkpoint-3"
    saved = folder / (
        "adapter_model.safetensors"
        if (folder / "adapter_model.safetensors").exists()
        else "model.safetensors"
    )
    stored = load_file(str(saved))
    for name, weight in result["weights"].items():
        key = next(
            k for k in stored if k.endswith(name.replace(".default", "").removeprefix("base_model.model."))
        )
        assert torch.equal(weight, stored[key]), name


# --- one process -----------------------------------------------------------------------------
def test_sft_trainer_trains_as_on_transformers(tmp_path):
    """SFTTrainer: the same losses, TRL metrics, checkpoint files, model card and weights as on transformers."""
    for backend in ("transformers", "hf_lightning"):
        run_worker(tmp_path, backend, ["sft"])
    ours = result(tmp_path, "hf_lightning", "sft")
    assert_same_run(result(tmp_path, "transformers", "sft"), ours)
    logged = [e for e in ours["log_history"] if "loss" in e]
    assert len(logged) == 6 and all(
        {"entropy", "mean_token_accuracy", "num_tokens"} <= set(e) for e in logged
    )


SCENARIOS = ["sft", "sft_resume", "sft_best", "lora", "lora_resume", "lora_best", "dpo"]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    """Every scenario, run by each backend in one process (SFT, its resume and best model; LoRA; DPO)."""
    root = tmp_path_factory.mktemp("trl")
    for backend in ("transformers", "hf_lightning"):
        run_worker(root, backend, SCENARIOS)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["sft_best", "lora", "lora_best", "dpo"])
def test_trl_run_matches_transformers(one_process, scenario):
    """LoRA SFT, the best model loaded at the end, DPO: as on transformers."""
    assert_same_run(
        result(one_process, "transformers", scenario), result(one_process, "hf_lightning", scenario)
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
DDP_SCENARIOS = ["sft", "sft_resume", "lora", "lora_resume"]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("trl-ddp")
    for backend in ("transformers", "hf_lightning"):
        run_worker(root, backend, DDP_SCENARIOS, world=2)
    return root


@pytest.mark.slow
@pytest.mark.ddp
@pytest.mark.parametrize("scenario", DDP_SCENARIOS)
def test_trl_ddp_matches_transformers(two_processes, scenario):
    """On 2 processes: the same logged values (total_flos aside: see the module docstring), files and weights."""
    theirs, ours = (
        result(two_processes, "transformers", scenario),
        result(two_processes, "hf_lightning", scenario),
    )
    assert_same_run(theirs, ours, skip=("total_flos",))


@pytest.mark.slow
@pytest.mark.ddp
@pytest.mark.parametrize("name", ["sft", "lora"])
def test_trl_ddp_resume_is_exact(two_processes, name):
    """On 2 processes a run resumed from checkpoint-3 ends bit-identical to the uninterrupted one."""
    assert_resume_is_exact(
        result(two_processes, "hf_lightning", name), result(two_processes, "hf_lightning", f"{name}_resume")
    )
