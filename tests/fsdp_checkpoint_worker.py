"""One rank of a 2-process FSDP run that checkpoints, for ``tests/checkpoint/test_fsdp_checkpoints.py``.

``python tests/fsdp_checkpoint_worker.py OUT KIND RUN [RESUME_FROM]``:

- ``KIND``: ``full`` (``FULL_STATE_DICT``) or ``sharded`` (``SHARDED_STATE_DICT``) under FSDP2;
  ``full1`` / ``sharded1`` the same under FSDP1 (``fsdp_config['version'] = 1``); ``zero2`` / ``zero3``
  DeepSpeed ZeRO-2 / ZeRO-3 instead of FSDP, ``zero2s`` ZeRO-2 with ``optimizer`` and ``scheduler`` sections;
- ``RUN``: the name of the run (its ``output_dir`` is ``OUT/RUN``); ``best`` also evaluates every 2 steps
  and loads the best model at the end; ``kill`` SIGKILLs rank 1 while it writes its shard of step 4.

Trains a tiny GPT-2 with AdamW for 4 optimizer steps (GA 2), a checkpoint every 2 steps, and writes
``OUT/RUN_rank{r}.pt``: the losses logged, the full weights after training, the ``log_history``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch

from tests.tiny import causal_lm_data, tiny_gpt2

__all__ = ["run_kind", "train", "whole_and_resumed"]


def _kill_rank_one_in_save() -> None:
    """Rank 1 dies (SIGKILL) in the middle of the second sharded save, after writing its data file."""
    from torch.distributed.checkpoint import FileSystemWriter

    original = FileSystemWriter.write_data
    calls = {"n": 0}

    def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
        result = original(self, plan, planner)
        calls["n"] += 1
        if calls["n"] == 3:  # step 2: model + optimizer; step 4: the model's shard, then death
            result.wait()
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    FileSystemWriter.write_data = write_data  # type: ignore[method-assign]


def _zero_config(stage: int, sections: bool) -> dict:
    config: dict = {
        "zero_optimization": {"stage": stage},
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto",
        "gradient_clipping": "auto",
    }
    if sections:  # the optimizer and the schedule described by the configuration, every value "auto"
        config["optimizer"] = {
            "type": "AdamW",
            "params": dict.fromkeys(("lr", "betas", "eps", "weight_decay"), "auto"),
        }
        names = ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps")
        config["scheduler"] = {
            "type": "WarmupDecayLR",
            "params": {**dict.fromkeys(names, "auto"), "warmup_type": "linear"},
        }
    return config


def train(out_dir: str, kind: str, run: str, resume: str | None) -> dict:
    from hf_lightning import Trainer, TrainingArguments
    from hf_lightning.checkpoint.sharded import gathered_model_state

    best = run.startswith("best")
    if kind.startswith("zero"):
        sharding: dict = {"deepspeed": _zero_config(int(kind[4]), sections=kind.endswith("s"))}
    else:
        state_dict_type = {"full": "FULL_STATE_DICT", "sharded": "SHARDED_STATE_DICT"}[kind.rstrip("1")]
        layers = {"transformer_layer_cls_to_wrap": ["GPT2Block"], "state_dict_type": state_dict_type}
        sharding = {
            "fsdp": "full_shard auto_wrap",
            "fsdp_config": {**layers, "version": 1 if kind.endswith("1") else 2},
        }
    args = TrainingArguments(
        os.path.join(out_dir, run),
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        seed=3,
        per_device_train_batch_size=2,
        per_device_eval_batch_size=4,
        gradient_accumulation_steps=2,
        max_steps=4,
        learning_rate=0.01,
        lr_scheduler_type="linear",
        logging_steps=1,
        save_steps=2,
        ddp_timeout=60,
        eval_strategy="steps" if best else "no",
        eval_steps=2,
        load_best_model_at_end=best,
        metric_for_best_model="eval_loss" if best else None,
        greater_is_better=True if best else None,  # the step-2 checkpoint is the best: not the last one
        **sharding,
    )
    if run.startswith("kill") and os.environ["RANK"] == "1":
        _kill_rank_one_in_save()
    model = tiny_gpt2(dropout=0.0)
    data = causal_lm_data(n=32, seed=5)
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:8] if best else None)
    trainer.train(resume_from_checkpoint=resume)
    full = gathered_model_state(model)  # FSDP2's DTensors, FSDP1's flat shards or ZeRO-3's partitions
    return {
        "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
        "state": full,
        "log_history": trainer.state.log_history,
        "best": trainer.state.best_model_checkpoint,
    }


def run_kind(out: Path, kind: str, run: str, resume: str | None = None) -> list[dict[str, Any]]:
    """Launch the 2 ranks of one run (from the tests) and return each rank's record."""
    from tests._ddp import run_ranks

    run_ranks(__file__, [str(out), kind, run, *([resume] if resume else [])], world=2)
    return [torch.load(out / f"{run}_rank{rank}.pt", weights_only=False) for rank in range(2)]


def whole_and_resumed(out: Path, kinds: tuple[str, ...]) -> dict[str, Any]:
    """Per kind: the uninterrupted run (``kind``) and the run resumed from its checkpoint-2 by new processes
    (``kind_resumed``); ``"out"`` is the folder."""
    found: dict[str, Any] = {"out": out}
    for kind in kinds:
        found[kind] = run_kind(out, kind, f"{kind}_whole")
        found[f"{kind}_resumed"] = run_kind(
            out, kind, f"{kind}_resumed", str(out / f"{kind}_whole" / "checkpoint-2")
        )
    return found


if __name__ == "__main__":
    out, kind, run = sys.argv[1:4]
    record = train(out, kind, run, sys.argv[4] if len(sys.argv) > 4 else None)
    torch.save(record, os.path.join(out, f"{run}_rank{os.environ['RANK']}.pt"))
    torch.distributed.destroy_process_group()  # an orderly exit: no gloo thread left to the interpreter's end
