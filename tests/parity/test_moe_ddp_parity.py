"""MoE router auxiliary loss under two processes (gloo, torchrun's variables), as transformers scales it.

A Mixtral or Qwen2-MoE model with ``output_router_logits=True`` adds ``router_aux_loss_coef × aux``
to its loss, which divides its cross-entropy by ``num_items_in_batch``. With
``average_tokens_across_devices`` transformers multiplies the whole loss by the number of processes
(the count is global; DDP averages the gradients), the auxiliary term included. The test launches
this file twice; each process trains both models with transformers' Trainer and hf_lightning's
(batch 2, GA 2); every logged loss, gradient norm and the final weights must agree.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from tests._ddp import run_ranks

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

MODELS = ("mixtral", "qwen2_moe")
LIBS = ("transformers", "ours")


def train(lib_name: str, name: str, out_dir: str) -> dict:
    import transformers

    import hf_lightning
    from tests.parity.zoo_models import collate, row

    lib = transformers if lib_name == "transformers" else hf_lightning
    zoo = row(name)
    model = zoo.build()
    model.router_aux_loss_coef = 0.1  # a term large enough to show in every logged number (default 0.001)
    args = lib.TrainingArguments(
        out_dir,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        save_strategy="no",
        seed=0,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=3,
        learning_rate=0.05,
        optim="sgd",
        lr_scheduler_type="constant",
        train_sampling_strategy="sequential",
        logging_steps=1,
    )
    trainer = lib.Trainer(model=model, args=args, train_dataset=zoo.data(24, 0), data_collator=collate)
    trainer.train()
    logs = [{k: h[k] for k in ("loss", "grad_norm")} for h in trainer.state.log_history if "loss" in h]
    return {"logs": logs, "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("moe_ddp")
    run_ranks(__file__, [str(out)], world=2, timeout=900)
    return {
        f"{lib}_{m}": torch.load(out / f"{lib}_{m}_rank0.pt", weights_only=True)
        for lib in LIBS
        for m in MODELS
    }


@pytest.mark.parametrize("name", MODELS)
def test_router_auxiliary_loss_is_scaled_as_transformers_scales_it(runs, name):
    """2 processes: the same logged losses and gradient norms at every step, and the same final weights."""
    ours, theirs = runs[f"ours_{name}"], runs[f"transformers_{name}"]
    assert len(ours["logs"]) == len(theirs["logs"]) == 3
    for mine, other in zip(ours["logs"], theirs["logs"]):
        for key in mine:
            torch.testing.assert_close(mine[key], other[key], rtol=1e-5, atol=1e-6, msg=key)
    for key, value in theirs["state"].items():
        torch.testing.assert_close(ours["state"][key], value, atol=1e-5, rtol=1e-4, msg=key)


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    for lib in LIBS:
        for name in MODELS:
            torch.save(
                train(lib, name, str(target / f"{lib}_{name}")), target / f"{lib}_{name}_rank{rank}.pt"
            )
