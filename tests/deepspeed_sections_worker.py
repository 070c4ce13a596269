"""One process of ``tests/parity/test_deepspeed_sections.py``: transformers' or hf_lightning's Trainer under DeepSpeed.

``python tests/deepspeed_sections_worker.py OUT LIBRARY SECTIONS`` trains a tiny GPT-2 for 3 optimizer steps
(GA 2, warmup 2, weight decay 0.1) under ZeRO-2 with a DeepSpeed configuration that has no section
(``none``), an ``optimizer`` section (``optimizer``) or both sections (``both``), every value
``"auto"``, and writes ``OUT/LIBRARY_SECTIONS.pt``: the losses and learning rates logged, the final
weights and the classes of ``trainer.optimizer`` and ``trainer.lr_scheduler``. Two more cases have no
section: ``lora`` trains a LoRA adapter (its no-decay group is empty, which DeepSpeed drops) and ``retry``
runs ``auto_find_batch_size`` from 4, the first attempt failing with an out-of-memory error (ZeRO
has rewritten the first attempt's optimizer).
"""

from __future__ import annotations

import os
import sys

import torch

from tests.tiny import causal_lm_data, tiny_gpt2

_AUTO_ADAMW = {
    "type": "AdamW",
    "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
}
_AUTO_WARMUP_DECAY = {
    "type": "WarmupDecayLR",
    "params": {
        "warmup_min_lr": "auto",
        "warmup_max_lr": "auto",
        "warmup_num_steps": "auto",
        "total_num_steps": "auto",
        "warmup_type": "linear",
    },
}


def config(sections: str, library: str) -> dict:
    ds: dict = {
        "zero_optimization": {"stage": 2},
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
    }  # no "gradient_clipping" key: transformers (Accelerate) clips at 1.0 then
    if sections in ("optimizer", "both"):
        # DeepSpeed's fused Adam needs a compiled op on CPU; its torch branch is the same update
        torch_adam = {"torch_adam": True} if library == "transformers" else {}
        ds["optimizer"] = {**_AUTO_ADAMW, "params": {**_AUTO_ADAMW["params"], **torch_adam}}
    if sections == "both":
        ds["scheduler"] = _AUTO_WARMUP_DECAY
    return ds


def _model(sections: str) -> torch.nn.Module:
    model = tiny_gpt2(dropout=0.0)
    if sections == "lora":
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(4)
        model = get_peft_model(model, LoraConfig(r=4, target_modules=["c_attn"], lora_dropout=0.0))
    return model


def _out_of_memory_above(base: type, size: int) -> object:
    class OutOfMemoryAbove(base):  # type: ignore[misc, valid-type]
        def on_step_end(self, args, state, control, **kwargs):
            if state.train_batch_size > size:
                raise RuntimeError("CUDA out of memory.")

    return OutOfMemoryAbove()


def main(out: str, library: str, sections: str) -> None:
    torch.set_num_threads(1)
    import deepspeed.comm.torch

    deepspeed.comm.torch.build_shm_op = lambda: None  # an optional g++ build (~80 s); gloo serves without it
    if library == "transformers":
        from transformers import Trainer, TrainerCallback, TrainingArguments
    else:
        from hf_lightning import Trainer, TrainerCallback, TrainingArguments
    retry = sections == "retry"
    args = TrainingArguments(
        os.path.join(out, f"{library}_{sections}"),
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        save_strategy="no",
        seed=3,
        per_device_train_batch_size=4 if retry else 2,
        auto_find_batch_size=retry,
        gradient_accumulation_steps=2,
        max_steps=3,
        learning_rate=0.01,
        warmup_steps=2,
        weight_decay=0.1,
        logging_steps=1,
        deepspeed=config(sections, library),
    )
    model = _model(sections)
    callbacks = [_out_of_memory_above(TrainerCallback, 3)] if retry else None
    data = causal_lm_data(n=32, seed=5)
    for (
        sample
    ) in data:  # no first-position target: GPT-2's item count is then the same in both (divergence 1)
        sample["labels"][0] = -100
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    scheduler = getattr(trainer.lr_scheduler, "scheduler", trainer.lr_scheduler)  # transformers' wrappers
    record = {
        "losses": [entry["loss"] for entry in logged],
        "learning_rates": [entry["learning_rate"] for entry in logged],
        "state": {name: value.detach().clone() for name, value in model.state_dict().items()},
        "optimizer": type(trainer.optimizer).__name__,
        "scheduler": type(scheduler).__name__,
        "train_batch_size": trainer._train_batch_size,
    }
    torch.save(record, os.path.join(out, f"{library}_{sections}.pt"))


if __name__ == "__main__":
    main(*sys.argv[1:4])
