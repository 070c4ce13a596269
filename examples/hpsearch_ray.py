"""Hyperparameter search with Ray Tune (offline): learning rate and warmup of a small GPT-2.

Trials run in Ray worker processes, two at a time on a local Ray instance (or on a cluster with
``--address``); the ASHA scheduler stops trials whose evaluation loss falls behind. Each trial's
checkpoints go to ``output_dir/run-{trial_id}/``, and the best run's ``run_summary`` is Ray's result grid.
It needs the ``examples`` extra (``ray[tune]`` beside ``transformers``): pip install -e ".[examples]".

    python examples/hpsearch_ray.py [--n_trials 4] [--max_steps 40] [--address ray://head:10001]
"""

from __future__ import annotations

import argparse
import os

from _extras import require

require("examples", "transformers", "ray.tune")

import torch  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def byte_chunks(seq_len: int, limit: int) -> list[dict[str, torch.Tensor]]:
    """The first ``limit`` chunks of Python's help topics as UTF-8 bytes: causal-LM examples."""
    from pydoc_data.topics import topics

    data = "\n\n".join(topics[key] for key in sorted(topics)).encode("utf-8")
    ids = torch.tensor(list(data[: seq_len * limit]), dtype=torch.long).view(limit, seq_len)
    return [{"input_ids": row, "labels": row.clone()} for row in ids]


def model_init(trial):
    """A fresh 2-layer GPT-2 for each trial, built in the Ray worker."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.set_num_threads(1)
    config = GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    model = GPT2LMHeadModel(config)
    # GPT-2's class name does not name its loss, so transformers would warn once and fall back to this one
    model.loss_type = "ForCausalLM"
    return model


def hp_space(trial):
    from ray import tune

    return {"learning_rate": tune.loguniform(1e-4, 1e-2), "warmup_steps": tune.randint(0, 10)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n_trials", type=int, default=4)
    parser.add_argument("--max_steps", type=int, default=40, help="training steps of each trial")
    parser.add_argument("--address", default=None, help="a Ray cluster to join (default: start a local one)")
    parser.add_argument("--output_dir", default="hpsearch_ray_output")
    cli = parser.parse_args()

    import ray
    from ray.tune.schedulers import ASHAScheduler

    from hf_lightning import Trainer, TrainingArguments

    if cli.address is None:  # a small local instance; hyperparameter_search would start a default one
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    examples = byte_chunks(seq_len=64, limit=576)
    args = TrainingArguments(
        output_dir=cli.output_dir,
        max_steps=cli.max_steps,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=64,
        eval_strategy="steps",
        eval_steps=10,
        logging_steps=10,
        save_strategy="steps",
        save_steps=20,
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
    )
    trainer = Trainer(
        model_init=model_init, args=args, train_dataset=examples[64:], eval_dataset=examples[:64]
    )
    best = trainer.hyperparameter_search(
        hp_space=hp_space,
        n_trials=cli.n_trials,
        direction="minimize",
        backend="ray",
        address=cli.address,
        resources_per_trial={"cpu": 1},
        scheduler=ASHAScheduler(metric="objective", mode="min", grace_period=2),
        storage_path=os.path.abspath(os.path.join(cli.output_dir, "ray_results")),
        reuse_actors=True,
        verbose=1,
    )
    frame = best.run_summary.get_dataframe()
    print(frame[["trial_id", "training_iteration", "objective"]].to_string(index=False))
    print(f"best trial {best.run_id}: eval loss {best.objective:.3f} with {best.hyperparameters}")
    print(f"its checkpoints: {os.path.join(cli.output_dir, 'run-' + best.run_id)}")


if __name__ == "__main__":
    main()
