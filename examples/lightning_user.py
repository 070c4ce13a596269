"""For Lightning users: an HF-convention model in a plain `lightning.Trainer` through `HFModule`.

`HFModule(model, args)` is a real LightningModule: transformers' loss scaling over gradient
accumulation, its optimizer and scheduler from `TrainingArguments`, `max_grad_norm` clipping.
Each Lightning batch is one accumulation window: wrap the DataLoader in `AccumulationWindows`.
The validation loss (`eval_loss`, as transformers names it) is printed before and after training.
It needs the `transformers` extra (for the model classes): pip install -e ".[transformers]".

    python examples/lightning_user.py [--max_epochs 3]
"""

from __future__ import annotations

import argparse
import logging
import warnings

from _extras import require

require("transformers", "transformers")

import lightning as L  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from hf_lightning import TrainingArguments, default_data_collator  # noqa: E402
from hf_lightning.adapters import AccumulationWindows, HFModule  # noqa: E402

# Lightning's info lines ("GPU available: ...", "TPU available: ...", the LitLogger tip, "Loading
# `train_dataloader` to estimate number of stepping batches", "`Trainer.fit` stopped") go through the first
# logger at INFO, a GPU's "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES" through the second; warnings still show.
for name in ("lightning.pytorch.utilities.rank_zero", "lightning.pytorch.accelerators.cuda"):
    logging.getLogger(name).setLevel(logging.WARNING)
# Lightning 2.6's CombinedLoader builds torch's LeafSpec, which torch 2.10+ deprecates: nothing a user can do.
warnings.filterwarnings(
    "ignore", category=FutureWarning, module=r"lightning\.pytorch\.utilities\._pytree", message=".*LeafSpec"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max_epochs", type=int, default=3)
    cli = parser.parse_args()
    torch.set_num_threads(1)
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=32, bos_token_id=0, eos_token_id=0
        )
    )
    # GPT-2's class name does not name its loss, so transformers would warn once and fall back to this one
    model.loss_type = "ForCausalLM"
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
    loader = DataLoader(data[8:], batch_size=4, shuffle=True, collate_fn=default_data_collator)
    val = DataLoader(data[:8], batch_size=4, collate_fn=default_data_collator)
    module = HFModule(model, args)
    trainer = L.Trainer(
        max_epochs=cli.max_epochs,
        accelerator="auto",  # a GPU when there is one
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        log_every_n_steps=1,
    )
    before = trainer.validate(module, val, verbose=False)[0]["eval_loss"]
    print(f"before training: eval loss {before:.3f}")
    trainer.fit(module, AccumulationWindows(loader, args.gradient_accumulation_steps), val)
    train_loss = float(trainer.callback_metrics["train_loss"])
    after = trainer.validate(module, val, verbose=False)[0]["eval_loss"]
    print(
        f"after {trainer.global_step} optimizer steps: eval loss {after:.3f}, last train loss {train_loss:.3f}"
    )


if __name__ == "__main__":
    main()
