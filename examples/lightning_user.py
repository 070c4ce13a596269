"""For Lightning users: an HF-convention model in a plain `lightning.Trainer` through `HFModule`.

`HFModule(model, args)` is a real LightningModule: transformers' loss scaling over gradient
accumulation, its optimizer and scheduler from `TrainingArguments`, `max_grad_norm` clipping.
Each Lightning batch is one accumulation window: wrap the DataLoader in `AccumulationWindows`.

    python examples/lightning_user.py
"""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader

from hf_lightning import TrainingArguments, default_data_collator
from hf_lightning.adapters import AccumulationWindows, HFModule


def main() -> None:
    torch.set_num_threads(1)
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=32, bos_token_id=0, eos_token_id=0
        )
    )
    text = torch.tensor(list(("the quick brown fox jumps over the lazy dog. " * 40).encode()))
    rows = text[: (len(text) // 32) * 32].view(-1, 32)
    data = [{"input_ids": r, "labels": r.clone()} for r in rows]

    args = TrainingArguments(
        learning_rate=3e-3,
        gradient_accumulation_steps=2,
        warmup_steps=2,
        lr_scheduler_type="linear",
        max_grad_norm=1.0,
    )
    loader = DataLoader(data, batch_size=4, shuffle=True, collate_fn=default_data_collator)
    module = HFModule(model, args)
    trainer = L.Trainer(
        max_epochs=3,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    trainer.fit(module, train_dataloaders=AccumulationWindows(loader, args.gradient_accumulation_steps))
    print(
        f"optimizer steps: {trainer.global_step}, last train loss: {float(trainer.callback_metrics['train_loss']):.3f}"
    )


if __name__ == "__main__":
    main()
