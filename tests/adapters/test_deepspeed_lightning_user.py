"""A plain Lightning user under DeepSpeed: ``to_lightning(args)``'s strategy and ``DeepSpeedModule``.

Each run is its own process (DeepSpeed starts a process group, which must not outlive the run).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests._ddp import ROOT

pytestmark = pytest.mark.slow

SCRIPT = """
import json, sys
import lightning as L, torch
from torch.utils.data import DataLoader
from transformers import default_data_collator
from hf_lightning import TrainingArguments
from hf_lightning.adapters import AccumulationWindows, DeepSpeedModule, HFModule, to_lightning
from tests.tiny import causal_lm_data, tiny_gpt2

torch.set_num_threads(1)
module_name, stage = sys.argv[1], int(sys.argv[2])
extra = {"deepspeed": {"zero_optimization": {"stage": stage}, "gradient_clipping": "auto",
                       "zero_optimization": {"stage": stage, "reduce_bucket_size": "auto"}}} if stage else {}
args = TrainingArguments("out", use_cpu=True, learning_rate=0.05, optim="sgd", max_steps=3,
                         gradient_accumulation_steps=2, report_to="none", **extra)  # SGD: no Adam noise amplification
plan = to_lightning(args)
trainer = L.Trainer(**{**plan.trainer_kwargs, "logger": False, "enable_checkpointing": False,
                       "enable_progress_bar": False, "enable_model_summary": False})
module = {"HFModule": HFModule, "DeepSpeedModule": DeepSpeedModule}[module_name](tiny_gpt2(dropout=0.0), args)
loader = DataLoader(causal_lm_data(24, seed=2), batch_size=2, collate_fn=default_data_collator)
try:
    trainer.fit(module, train_dataloaders=AccumulationWindows(loader, 2))
except TypeError as exc:
    print(json.dumps({"error": str(exc)}))
    sys.exit(0)
print(json.dumps({"weights": {k: v.detach().float().sum().item() for k, v in module.model.state_dict().items()}}))
"""


def _run(module: str, stage: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, module, str(stage)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_deepspeed_module_trains_as_hf_module_without_deepspeed() -> None:
    """``plan.strategy`` (the config made acceptable to Lightning: no ``"auto"`` left, no GA keys) and
    ``DeepSpeedModule`` with GA 2 reach the weights ``HFModule`` reaches without DeepSpeed."""
    plain, zero2 = _run("HFModule", 0), _run("DeepSpeedModule", 2)
    for name, value in plain["weights"].items():
        assert zero2["weights"][name] == pytest.approx(value, rel=1e-5, abs=1e-6), name


def test_hf_module_under_deepspeed_says_to_use_deepspeed_module() -> None:
    """A plain ``HFModule`` would lose all but the last micro-batch's gradients under ZeRO: it refuses."""
    assert "use `hf_lightning.adapters.DeepSpeedModule`" in _run("HFModule", 2)["error"]
