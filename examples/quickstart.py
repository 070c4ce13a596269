"""Quickstart: fine-tune a small GPT-2 with hf_lightning.Trainer on Python's own docs.

The text is `pydoc_data.topics` (it ships with every CPython); the tokenizer is the identity on
UTF-8 bytes (vocabulary 256), so nothing is downloaded. The model is built from a config. It needs
the `transformers` extra (for the model classes): pip install -e ".[transformers]".

    python examples/quickstart.py [--max_steps 150] [--output_dir quickstart_output]
"""

from __future__ import annotations

import argparse
import math
import os

from _extras import require

require("transformers", "transformers")

import torch  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def byte_chunks(seq_len: int) -> list[dict[str, torch.Tensor]]:
    """Python's help topics as UTF-8 bytes, cut into causal-LM examples of `seq_len` tokens."""
    from pydoc_data.topics import topics

    data = "\n\n".join(topics[key] for key in sorted(topics)).encode("utf-8")
    ids = torch.tensor(list(data), dtype=torch.long)
    n = len(ids) // seq_len
    chunks = ids[: n * seq_len].view(n, seq_len)
    return [{"input_ids": row, "labels": row.clone()} for row in chunks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max_steps", type=int, default=150)
    parser.add_argument("--output_dir", default="quickstart_output")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 is fastest here)")
    cli = parser.parse_args()
    torch.set_num_threads(cli.threads)

    from transformers import GPT2Config, GPT2LMHeadModel  # the `transformers` extra: model classes only

    from hf_lightning import Trainer, TrainingArguments

    examples = byte_chunks(seq_len=64)
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(examples), generator=generator).tolist()
    eval_set = [examples[i] for i in order[:128]]
    train_set = [examples[i] for i in order[128:]]

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2, n_embd=128, n_head=4, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    model = GPT2LMHeadModel(config)
    # GPT-2's class name does not name its loss, so transformers would warn once and fall back to this one
    model.loss_type = "ForCausalLM"

    args = TrainingArguments(
        output_dir=cli.output_dir,
        max_steps=cli.max_steps,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=32,
        learning_rate=2e-3,
        warmup_steps=0.1,
        lr_scheduler_type="cosine",
        weight_decay=0.01,
        logging_steps=25,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=train_set, eval_dataset=eval_set)

    before = trainer.evaluate()["eval_loss"]
    print(f"before training: eval loss {before:.3f}, perplexity {math.exp(before):.1f}")
    result = trainer.train()
    after = trainer.evaluate()["eval_loss"]
    print(f"after {result.global_step} steps: eval loss {after:.3f}, perplexity {math.exp(after):.1f}")
    trainer.save_model(os.path.join(cli.output_dir, "final"))
    print(f"model saved to {os.path.join(cli.output_dir, 'final')}")


if __name__ == "__main__":
    main()
