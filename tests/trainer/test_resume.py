"""Resume parity: 8 steps straight equal 4 (or 2, or 6) steps, a new process, resume, the rest.

Tiny GPT-2 with dropout, per-device batch 2 x gradient accumulation 2, shuffled data, 14 samples (7 micro-
batches, 4 optimizer steps per epoch): stopping at 2 or 6 resumes in the middle of an epoch (seen batches
are skipped, the RNG restored after them), at 4 on an epoch boundary. The same for group_by_length
sampling on sequences of different lengths. The resumed halves all run in one fresh Python process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import hf_lightning
from tests.tiny import StopAt, causal_lm_data, tiny_gpt2

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = {  # name: (train_sampling_strategy, step at which the first process stops)
    "random-mid-first-epoch": ("random", 2),
    "random-epoch-boundary": ("random", 4),
    "random-mid-second-epoch": ("random", 6),
    "group_by_length-mid-first-epoch": ("group_by_length", 3),
    "group_by_length-mid-second-epoch": ("group_by_length", 6),
}


def ragged_lm_data(n: int = 14, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Token sequences of 4 to 15 tokens (group_by_length has something to group)."""
    g = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(n):
        ids = torch.randint(0, 256, (int(torch.randint(4, 16, (1,), generator=g)),), generator=g)
        data.append({"input_ids": ids, "labels": ids.clone()})
    return data


def pad_collator(features: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Right-pad input_ids with 0 (attention mask 0) and labels with -100."""
    width = max(len(f["input_ids"]) for f in features)
    batch = {
        "input_ids": torch.zeros(len(features), width, dtype=torch.long),
        "attention_mask": torch.zeros(len(features), width, dtype=torch.long),
        "labels": torch.full((len(features), width), -100, dtype=torch.long),
    }
    for row, f in enumerate(features):
        size = len(f["input_ids"])
        batch["input_ids"][row, :size] = f["input_ids"]
        batch["attention_mask"][row, :size] = 1
        batch["labels"][row, :size] = f["labels"]
    return batch


def make_trainer(output_dir: str, strategy: str, stop_at: int | None = None) -> hf_lightning.Trainer:
    """The run every case shares: 8 steps, logging every step; a first half saves the step it stops at."""
    saving = dict(save_steps=stop_at) if stop_at else dict(save_strategy="no")
    args = hf_lightning.TrainingArguments(
        output_dir=output_dir,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        max_steps=8,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        learning_rate=1e-3,
        warmup_steps=2,
        weight_decay=0.01,
        logging_steps=1,
        train_sampling_strategy=strategy,
        **saving,
    )
    ragged = strategy == "group_by_length"
    return hf_lightning.Trainer(
        model=tiny_gpt2(dropout=0.1),
        args=args,
        train_dataset=ragged_lm_data() if ragged else causal_lm_data(n=14),
        data_collator=pad_collator if ragged else None,
        callbacks=[StopAt(stop_at)] if stop_at else None,
    )


def step_logs(trainer_or_history) -> list[dict[str, float]]:
    history = getattr(getattr(trainer_or_history, "state", None), "log_history", trainer_or_history)
    return [
        {k: h[k] for k in ("step", "epoch", "loss", "learning_rate", "grad_norm")}
        for h in history
        if "loss" in h
    ]


RESUME_SCRIPT = """
import json, sys
import torch
torch.set_num_threads(1)
sys.path.insert(0, {root!r})
from tests.trainer.test_resume import CASES, make_trainer, step_logs

results = {{}}
for name, (strategy, stop) in CASES.items():
    folder = {base!r} + "/" + name
    trainer = make_trainer(folder, strategy)
    trainer.train(resume_from_checkpoint=f"{{folder}}/checkpoint-{{stop}}")
    torch.save(trainer.model.state_dict(), f"{{folder}}/resumed.pt")
    results[name] = {{"global_step": trainer.state.global_step, "logs": step_logs(trainer)}}
with open({base!r} + "/results.json", "w") as handle:
    json.dump(results, handle)
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Straight runs and first halves here; every second half in one new process."""
    base = tmp_path_factory.mktemp("resume")
    straight = {}
    for strategy in sorted({strategy for strategy, _ in CASES.values()}):
        trainer = make_trainer(str(base / f"straight-{strategy}"), strategy)
        trainer.train()
        straight[strategy] = trainer
    for name, (strategy, stop) in CASES.items():
        make_trainer(str(base / name), strategy, stop_at=stop).train()
    script = base / "resume.py"
    script.write_text(textwrap.dedent(RESUME_SCRIPT.format(root=ROOT, base=str(base))))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads((base / "results.json").read_text())
    return base, straight, results


@pytest.mark.parametrize("case", list(CASES))
def test_resumed_run_reaches_the_same_weights(runs, case):
    """The resumed second half ends with bit-identical weights to the uninterrupted run."""
    base, straight, results = runs
    strategy, _ = CASES[case]
    resumed = torch.load(base / case / "resumed.pt", weights_only=True)
    assert results[case]["global_step"] == 8
    for name, value in straight[strategy].model.state_dict().items():
        torch.testing.assert_close(resumed[name], value, rtol=0, atol=0, msg=name)


@pytest.mark.parametrize("case", list(CASES))
def test_resumed_run_has_the_same_log_history(runs, case):
    """The resumed run's log_history (checkpointed steps plus new ones) equals the uninterrupted run's."""
    _, straight, results = runs
    strategy, _ = CASES[case]
    assert results[case]["logs"] == step_logs(straight[strategy])


def test_ignore_data_skip_restarts_the_epoch_data(tmp_path):
    """With ignore_data_skip the resumed epoch starts from its first batch again (more steps' data differ)."""
    make_trainer(str(tmp_path / "a"), "random", stop_at=2).train()
    trainer = make_trainer(str(tmp_path / "a"), "random")
    trainer.args.ignore_data_skip = True
    trainer.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-2"))
    straight = make_trainer(str(tmp_path / "b"), "random")
    straight.train()
    assert trainer.state.global_step == 8
    assert step_logs(trainer)[2]["loss"] != step_logs(straight)[2]["loss"]
