"""Two processes (gloo, torchrun's variables) train as transformers' Trainer trains them.

The test launches this file twice as a script. Each process trains a tiny Llama with transformers'
Trainer and with hf_lightning's, for ``random``, ``sequential`` and ``group_by_length``, and (random)
``HFModule`` in a plain ``lightning.Trainer`` with a ``ShardedSampler(per_device_batch_size=...)``; a
recording collator logs each micro-batch's rows. 22 rows in batches of 2 make 11 batches an epoch, so
the last round of the two ranks is completed from the start of the epoch (accelerate's
``even_batches``).

- ``random`` / ``sequential``: each rank's micro-batches, every logged loss, gradient norm and learning
  rate, and the final weights equal transformers' (Llama: no label-count divergence).
- ``group_by_length``: each rank gets whole batches of the epoch's length-grouped order dealt in turn,
  exactly what accelerate's ``BatchSamplerShard`` gives transformers' Trainer; the order itself is a
  function of ``(seed, epoch)`` here and of the global random stream in transformers (divergence 15).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from tests._ddp import run_ranks

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

WORLD, BATCH, GA, EPOCHS, ROWS, SEED = 2, 2, 2, 2, 22, 3
STRATEGIES = ("random", "sequential", "group_by_length")


def lengths() -> list[int]:
    g = torch.Generator().manual_seed(1)
    return [3 + int(v) for v in (torch.rand(ROWS, generator=g) ** 2 * 10).tolist()]


def dataset() -> list[dict]:
    g = torch.Generator().manual_seed(2)
    return [
        {"input_ids": torch.randint(1, 128, (n,), generator=g), "idx": i} for i, n in enumerate(lengths())
    ]


class RecordingCollator:
    """Right-pads ``input_ids`` (labels -100 on padding) and logs each micro-batch's row indices."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        self.batches.append([int(f["idx"]) for f in features])
        width = max(len(f["input_ids"]) for f in features)
        ids = torch.zeros(len(features), width, dtype=torch.long)
        mask = torch.zeros(len(features), width, dtype=torch.long)
        for row, f in enumerate(features):
            ids[row, : len(f["input_ids"])] = f["input_ids"]
            mask[row, : len(f["input_ids"])] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


ARGS = dict(
    use_cpu=True,
    report_to="none",
    disable_tqdm=True,
    save_strategy="no",
    seed=SEED,
    per_device_train_batch_size=BATCH,
    gradient_accumulation_steps=GA,
    num_train_epochs=EPOCHS,
    learning_rate=0.05,
    optim="sgd",
    lr_scheduler_type="constant",
    remove_unused_columns=False,
    logging_steps=1,
)


def train(lib_name: str, strategy: str, out_dir: str) -> dict:
    """One library's run on this process: its micro-batches, step logs and final weights."""
    import transformers

    import hf_lightning
    from tests.tiny import tiny_llama

    lib = transformers if lib_name == "transformers" else hf_lightning
    collator = RecordingCollator()
    model = tiny_llama()
    args = lib.TrainingArguments(out_dir, train_sampling_strategy=strategy, **ARGS)
    trainer = lib.Trainer(model=model, args=args, train_dataset=dataset(), data_collator=collator)
    trainer.train()
    logs = [
        {k: h[k] for k in ("loss", "grad_norm", "learning_rate")}
        for h in trainer.state.log_history
        if "loss" in h
    ]
    return {"batches": collator.batches, "logs": logs, "state": _state(model)}


def train_lightning_user() -> dict:
    """HFModule in a plain lightning.Trainer (DDP), its DataLoader sampled by ShardedSampler."""
    import lightning as L
    from torch.utils.data import DataLoader

    from hf_lightning import TrainingArguments
    from hf_lightning.adapters import AccumulationWindows, HFModule
    from hf_lightning.adapters.samplers import ShardedSampler
    from tests.tiny import tiny_llama

    collator = RecordingCollator()
    sampler = ShardedSampler(ROWS, shuffle=True, seed=SEED, per_device_batch_size=BATCH)
    loader = DataLoader(dataset(), batch_size=BATCH, sampler=sampler, collate_fn=collator)
    model = tiny_llama()
    args = TrainingArguments(**{k: v for k, v in ARGS.items() if k not in ("report_to", "disable_tqdm")})
    trainer = L.Trainer(
        accelerator="cpu",
        devices=WORLD,
        strategy="ddp",
        max_epochs=EPOCHS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(HFModule(model, args), AccumulationWindows(loader, GA))
    return {"batches": collator.batches, "state": _state(model)}


def _state(model: torch.nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("ddp_split")
    run_ranks(__file__, [str(out)], world=WORLD, timeout=900)
    return {
        name: [torch.load(out / f"{name}_rank{r}.pt", weights_only=True) for r in range(WORLD)]
        for name in [f"{lib}_{s}" for lib in ("transformers", "ours") for s in STRATEGIES] + ["lightning"]
    }


@pytest.mark.parametrize("strategy", ["random", "sequential"])
def test_each_rank_trains_on_transformers_micro_batches(runs, strategy):
    """Every rank's micro-batches of both epochs are the ones transformers' Trainer gives that rank."""
    for rank in range(WORLD):
        assert runs[f"ours_{strategy}"][rank]["batches"] == runs[f"transformers_{strategy}"][rank]["batches"]


@pytest.mark.parametrize("strategy", ["random", "sequential"])
def test_losses_and_weights_equal_transformers(runs, strategy):
    """Each logged loss, gradient norm and learning rate, and the final weights, equal transformers'."""
    ours, theirs = runs[f"ours_{strategy}"][0], runs[f"transformers_{strategy}"][0]
    assert len(ours["logs"]) == len(theirs["logs"]) == 6
    for mine, other in zip(ours["logs"], theirs["logs"]):
        for key in mine:
            torch.testing.assert_close(mine[key], other[key], rtol=1e-5, atol=1e-7)
    for name, value in theirs["state"].items():
        torch.testing.assert_close(ours["state"][name], value, atol=1e-5, rtol=1e-4, msg=name)


def test_group_by_length_deals_whole_batches_as_accelerate(runs):
    """group_by_length: rank r gets accelerate's BatchSamplerShard of the epoch's length-grouped order."""
    from accelerate.data_loader import BatchSamplerShard
    from torch.utils.data import BatchSampler

    from hf_lightning.adapters.samplers import LengthGroupedSampler

    order = LengthGroupedSampler(BATCH * GA, lengths=lengths(), seed=SEED, num_replicas=1, rank=0)
    for rank in range(WORLD):
        expected = []
        for epoch in range(EPOCHS):
            order.set_epoch(epoch)
            expected += [
                list(b) for b in BatchSamplerShard(BatchSampler(list(order), BATCH, False), WORLD, rank)
            ]
        assert runs["ours_group_by_length"][rank]["batches"] == expected
        # transformers' ranks get whole batches too: together they cover each epoch's rows
        theirs = runs["transformers_group_by_length"][rank]["batches"]
        assert len(theirs) == len(expected) and all(len(b) == BATCH for b in theirs)


def test_a_lightning_user_with_sharded_sampler_gets_transformers_split(runs):
    """HFModule + ShardedSampler(per_device_batch_size=...) under a plain DDP lightning.Trainer: transformers'
    micro-batches on every rank and transformers' final weights."""
    for rank in range(WORLD):
        assert runs["lightning"][rank]["batches"] == runs["transformers_random"][rank]["batches"]
    for name, value in runs["transformers_random"][0]["state"].items():
        torch.testing.assert_close(runs["lightning"][0]["state"][name], value, atol=1e-5, rtol=1e-4, msg=name)


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    for lib in ("transformers", "ours"):
        for name in STRATEGIES:
            result = train(lib, name, str(target / f"{lib}_{name}"))
            torch.save(result, target / f"{lib}_{name}_rank{rank}.pt")
    torch.save(train_lightning_user(), target / f"lightning_rank{rank}.pt")
