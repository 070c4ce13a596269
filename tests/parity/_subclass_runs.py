"""Shared by the tests that run a library's Trainer subclass on transformers and on hf_lightning.

A worker script (``tests/trl_worker.py``, ``tests/st_worker.py``) trains each scenario in
``ROOT/BACKEND/<scenario>`` and records ``<scenario>.json`` and ``<scenario>.safetensors``; these helpers run
it and compare what it recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from tests._ddp import run_ranks

__all__ = [
    "assert_best_loaded",
    "assert_resume_is_exact",
    "assert_same_logs",
    "assert_same_run",
    "result",
    "run_worker",
]

ROOT = str(Path(__file__).resolve().parents[2])
OURS_ONLY = {"checkpoint-manifest.json", "training_args.json"}  # docs/divergences.md
TIMING = ("_runtime", "_per_second")


def run_worker(worker: str, root: Path, backend: str, scenarios: list[str], world: int = 1) -> None:
    """Run ``worker`` for ``backend`` on ``world`` processes (a scenario that raises records its traceback)."""
    if world > 1:
        run_ranks(worker, [backend, str(root), *scenarios], world=world, timeout=1500)
        return
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, worker, backend, str(root), *scenarios],
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
    names = (
        "loss",
        "grad_norm",
        "learning_rate",
        "entropy",
        "mean_token_accuracy",
    )  # TRL's num_tokens restarts

    def steps_after_3(run: dict) -> list[dict]:
        entries = [e for e in run["log_history"] if e.get("step", 0) > 3 and "loss" in e]
        return [{k: e[k] for k in names if k in e} for e in entries]

    after, again = steps_after_3(whole), steps_after_3(resumed)
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
        plain = name.replace(".default", "").removeprefix(
            "base_model.model."
        )  # PEFT's names of adapter weights
        matches = [
            k for k in stored if plain.endswith(k) or k.endswith(plain)
        ]  # sentence-transformers: "0.auto_model."
        assert matches, name
        assert torch.equal(weight, stored[max(matches, key=len)]), name
