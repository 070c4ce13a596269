"""One rank of a 2-process (gloo) LoRA fine-tune that checkpoints, for ``tests/checkpoint/test_peft_ddp.py``.

``python tests/peft_ddp_worker.py OUT RUN [RESUME_FROM]``: a LoRA on a tiny Llama, 4 optimizer steps of 2 rows per
process, a checkpoint every 2 steps; ``RUN`` starting with ``best`` also evaluates every 2 steps with a scripted
score that makes checkpoint-2 the best, and loads it at the end. Writes ``OUT/RUN_rank{r}.pt``: the losses logged,
the model's state dict after training and the best checkpoint.
"""

from __future__ import annotations

import os
import sys

import torch

from tests.tiny_loading import peft_data, peft_model

__all__ = ["train"]


def train(out_dir: str, run: str, resume: str | None) -> dict:
    from hf_lightning import Trainer, TrainerCallback, TrainingArguments

    best = run.startswith("best")
    scores = iter([0.9, 0.1, 0.2])

    class Score(TrainerCallback):
        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            metrics["eval_score"] = next(scores)

    args = TrainingArguments(
        os.path.join(out_dir, run),
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        seed=0,
        per_device_train_batch_size=2,
        max_steps=4,
        learning_rate=1e-2,
        logging_steps=1,
        save_steps=2,
        ddp_timeout=60,
        eval_strategy="steps" if best else "no",
        eval_steps=2,
        load_best_model_at_end=best,
        metric_for_best_model="score" if best else None,
        prediction_loss_only=True,
    )
    trainer = Trainer(
        model=peft_model("lora"),
        args=args,
        train_dataset=peft_data("lora", n=16),
        eval_dataset=peft_data("lora", n=4, seed=1) if best else None,
        callbacks=[Score()] if best else None,
    )
    trainer.train(resume_from_checkpoint=resume)
    return {
        "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
        "state": {name: value.detach().clone() for name, value in trainer.model.state_dict().items()},
        "best": trainer.state.best_model_checkpoint,
    }


if __name__ == "__main__":
    out, run = sys.argv[1:3]
    record = train(out, run, sys.argv[3] if len(sys.argv) > 3 else None)
    torch.save(record, os.path.join(out, f"{run}_rank{os.environ['RANK']}.pt"))
