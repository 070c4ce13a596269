"""Shard a small GPT-2 with FSDP2 over 2 CPU processes (gloo); nothing is downloaded.

    torchrun --nproc_per_node=2 examples/train_fsdp.py              # FSDP2, one node
    torchrun --nnodes=2 --node_rank=R --nproc_per_node=1 \\
        --master_addr=HOST --master_port=29500 examples/train_fsdp.py  # the same over 2 machines

Each process holds half of every GPT2Block's parameters (printed at the end). On GPUs drop
``use_cpu=True``. It writes no checkpoint (``save_strategy="no"``); FSDP checkpoints, full or sharded,
are in docs/distributed.md. It needs the ``transformers`` extra (for the model classes):
pip install -e ".[transformers]".
"""

from __future__ import annotations

from _extras import require

require("transformers", "transformers")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from hf_lightning import Trainer, TrainingArguments  # noqa: E402


def main() -> None:
    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=4, n_embd=128, n_head=4, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    model = GPT2LMHeadModel(config)
    # GPT-2's class name does not name its loss, so transformers would warn once and fall back to this one
    model.loss_type = "ForCausalLM"
    g = torch.Generator().manual_seed(0)
    data = [
        {"input_ids": (ids := torch.randint(0, 256, (32,), generator=g)), "labels": ids} for _ in range(64)
    ]
    args = TrainingArguments(
        "fsdp_output",
        use_cpu=True,
        fsdp=True,  # FSDP2 (fully_shard), transformers' default version
        fsdp_config={"transformer_layer_cls_to_wrap": ["GPT2Block"], "reshard_after_forward": True},
        per_device_train_batch_size=4,
        max_steps=8,
        logging_steps=2,
        save_strategy="no",
        report_to="none",
    )
    Trainer(model=model, args=args, train_dataset=data).train()
    local = sum(getattr(p, "to_local", lambda p=p: p)().numel() for p in model.parameters())
    total = sum(p.numel() for p in model.parameters())
    # the process's rank under torchrun (RANK) or srun (SLURM_PROCID)
    print(f"rank {args.process_index}: holds {local:,} of {total:,} parameter elements")


if __name__ == "__main__":
    main()
