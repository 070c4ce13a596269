"""One rank of a 2-process (gloo) run that checkpoints, for ``tests/checkpoint/test_loading_distributed.py``.

``python tests/loading_worker.py OUT KIND MODEL RUN [RESUME_FROM]``: 4 optimizer steps of 2 rows per process, a
checkpoint every 2 steps, under ``KIND``: ``ddp``, ``fsdp`` / ``fsdp_sharded`` (FSDP2 with ``FULL_STATE_DICT`` /
``SHARDED_STATE_DICT``) or ``zero3`` (DeepSpeed ZeRO-3); ``MODEL`` is ``lora`` (a LoRA on a tiny Llama) or a
model whose saved keys transformers converts (``mixtral``, ``vit``). Every 2 steps an evaluation with a scripted
score that makes checkpoint-2 the best, which is loaded at the end. Writes ``OUT/RUN_rank{r}.pt``: the losses
logged, the model's full state dict after the last step and after training (the best model), the best checkpoint.
"""

from __future__ import annotations

import os
import sys

import torch

from tests.tiny_loading import batch_for, converted_model, peft_data, peft_model

__all__ = ["train"]

LAYERS = {"lora": "LlamaDecoderLayer", "mixtral": "MixtralDecoderLayer", "vit": "ViTLayer"}


def _sharding(kind: str, model: str) -> dict:
    if kind.startswith("fsdp"):
        state_dict_type = "SHARDED_STATE_DICT" if kind.endswith("sharded") else "FULL_STATE_DICT"
        config = {"transformer_layer_cls_to_wrap": [LAYERS[model]], "state_dict_type": state_dict_type}
        return {"fsdp": "full_shard auto_wrap", "fsdp_config": config}
    if kind.startswith("zero"):
        zero = {"zero_optimization": {"stage": int(kind[4])}}
        auto = dict.fromkeys(
            ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size"), "auto"
        )
        return {"deepspeed": {**zero, **auto, "gradient_clipping": "auto"}}
    return {}


def _model_and_data(model: str):
    if model == "lora":
        return peft_model("lora"), peft_data("lora", n=16), peft_data("lora", n=4, seed=1)
    data = batch_for(model)
    return converted_model(model), data(16), data(4, seed=1)


def train(out_dir: str, kind: str, model_name: str, run: str, resume: str | None) -> dict:
    from hf_lightning import Trainer, TrainerCallback, TrainingArguments
    from hf_lightning.checkpoint.sharded import gathered_model_state

    scores = iter([0.9, 0.1, 0.2])
    last_step: dict = {}

    class Record(TrainerCallback):
        def on_evaluate(self, args, state, control, metrics=None, **kwargs):
            metrics["eval_score"] = next(scores)

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == state.max_steps:  # every process: a collective under FSDP and ZeRO-3
                last_step.update({k: v.clone() for k, v in gathered_model_state(model).items()})  # not views

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
        eval_strategy="steps",
        eval_steps=2,
        load_best_model_at_end=True,
        metric_for_best_model="score",
        prediction_loss_only=True,
        **_sharding(kind, model_name),
    )
    model, train_data, eval_data = _model_and_data(model_name)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_data,
        eval_dataset=eval_data,
        callbacks=[Record()],
    )
    trainer.train(resume_from_checkpoint=resume)
    return {
        "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
        "last_step": last_step,
        "state": gathered_model_state(model),  # FSDP2's DTensors or ZeRO-3's partitions, gathered
        "best": trainer.state.best_model_checkpoint,
    }


if __name__ == "__main__":
    out, kind, model_name, run = sys.argv[1:5]
    record = train(out, kind, model_name, run, sys.argv[5] if len(sys.argv) > 5 else None)
    torch.save(record, os.path.join(out, f"{run}_rank{os.environ['RANK']}.pt"))
