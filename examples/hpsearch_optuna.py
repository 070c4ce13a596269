"""Hyperparameter search with Optuna (offline): learning rate, warmup and seed of a small GPT-2.

The data are Python's own help topics as UTF-8 bytes (vocabulary 256), the model is built from a
config, so nothing is downloaded. Each trial trains 40 steps (``--max_steps``) and evaluates every 10; Optuna's
MedianPruner stops trials whose evaluation loss falls behind. With ``--storage`` the study is kept in
SQLite: run the script again and it continues the study up to ``--n_trials`` instead of starting over.
It needs the ``examples`` extra (``optuna`` beside ``transformers``): pip install -e ".[examples]".

    python examples/hpsearch_optuna.py [--n_trials 6] [--max_steps 40] [--storage sqlite:///hpsearch.db]
"""

from __future__ import annotations

import argparse
import os

from _extras import require

require("examples", "transformers", "optuna")

import torch  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def byte_chunks(seq_len: int, limit: int) -> list[dict[str, torch.Tensor]]:
    """The first ``limit`` chunks of Python's help topics as UTF-8 bytes: causal-LM examples."""
    from pydoc_data.topics import topics

    data = "\n\n".join(topics[key] for key in sorted(topics)).encode("utf-8")
    ids = torch.tensor(list(data[: seq_len * limit]), dtype=torch.long).view(limit, seq_len)
    return [{"input_ids": row, "labels": row.clone()} for row in ids]


def model_init(trial):
    """A fresh 2-layer GPT-2 for each trial (built after the trial's seed is set)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    model = GPT2LMHeadModel(config)
    # GPT-2's class name does not name its loss, so transformers would warn once and fall back to this one
    model.loss_type = "ForCausalLM"
    return model


def hp_space(trial):
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True),
        "warmup_steps": trial.suggest_int("warmup_steps", 0, 10),
        "seed": trial.suggest_int("seed", 0, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n_trials", type=int, default=6)
    parser.add_argument("--max_steps", type=int, default=40, help="training steps of each trial")
    parser.add_argument("--storage", default=None, help="e.g. sqlite:///hpsearch.db (resumable study)")
    parser.add_argument("--output_dir", default="hpsearch_optuna_output")
    cli = parser.parse_args()
    torch.set_num_threads(1)

    import optuna

    from hf_lightning import Trainer, TrainingArguments

    examples = byte_chunks(seq_len=64, limit=576)
    args = TrainingArguments(
        output_dir=cli.output_dir,
        max_steps=cli.max_steps,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=64,
        eval_strategy="steps",
        eval_steps=10,
        logging_steps=10,
        save_strategy="no",
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
        backend="optuna",
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=20),
        storage=cli.storage,
        study_name="hpsearch_optuna",
        load_if_exists=cli.storage is not None,
    )
    study = best.run_summary
    states = [trial.state.name.lower() for trial in study.trials]
    print(f"{len(states)} trials ({states.count('complete')} complete, {states.count('pruned')} pruned)")
    print(f"best trial {best.run_id}: eval loss {best.objective:.3f} with {best.hyperparameters}")


if __name__ == "__main__":
    main()
