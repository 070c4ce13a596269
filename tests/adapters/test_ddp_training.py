"""Training on 2 CPU processes (gloo) with each ``train_sampling_strategy``: data and weights are exact.

The test launches this file twice as a script, with the variables torchrun would set (``WORLD_SIZE``,
``RANK``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``). Each process trains
a tiny GPT-2 on variable-length sequences with every strategy in turn (so a later ``train()`` in a DDP
process must still see the launcher's world: Lightning's teardown deletes ``WORLD_SIZE`` from the
environment and ``adapters/fit.py`` puts it back); a recording collator logs the sample indices of every
micro-batch it pads. The test then checks that

- each optimizer step's effective batch (both ranks' micro-batches together) holds every one of its
  ``per_device × GA × world`` samples exactly once, and every epoch covers the dataset once;
- the micro-batches are the ones the standalone samplers give for that rank and epoch (``set_epoch``
  reached them: epoch 2 has another order);
- the final weights equal, within 1e-5, those of one process training on the same effective batches:
  an ``hf_lightning.Trainer`` with ``per_device × (GA × world)`` where its sampler draws the same samples
  per step (random, batch_rebalance), and for every strategy a plain torch loop taking the per-token
  mean over each step's samples, each sample run alone (no padding). Both hold only if
  ``num_items_in_batch`` is summed over ranks (``average_tokens_across_devices``) and DDP's gradient
  average is undone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from tests._ddp import run_ranks
from tests.tiny import tiny_gpt2

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

STRATEGIES = ("random", "group_by_length", "batch_rebalance")
WORLD, BATCH, GA, STEPS_PER_EPOCH, EPOCHS = 2, 2, 2, 3, 2
EFFECTIVE = WORLD * BATCH * GA
SIZE = EFFECTIVE * STEPS_PER_EPOCH
LEARNING_RATE = 0.05


def lengths() -> list[int]:
    """Sequence lengths 3..28, long-tailed enough that the samplers group differently."""
    g = torch.Generator().manual_seed(1)
    return [3 + int(v) for v in (torch.rand(SIZE, generator=g) ** 2 * 26).tolist()]


def dataset() -> list[dict]:
    """Sample i: ``lengths()[i]`` random tokens and its own index (which the collator logs and strips)."""
    g = torch.Generator().manual_seed(2)
    return [
        {"input_ids": torch.randint(1, 256, (n,), generator=g), "idx": i} for i, n in enumerate(lengths())
    ]


class RecordingCollator:
    """Right-pads ``input_ids`` (attention mask 0, labels -100 on padding) and logs each batch's indices."""

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


def train(strategy: str, out_dir: str, batch_size: int, ga: int) -> tuple[list[list[int]], dict]:
    """Train with ``strategy``; return the micro-batches this process saw and the final weights."""
    from hf_lightning import Trainer, TrainingArguments

    args = TrainingArguments(
        out_dir,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        save_strategy="no",
        seed=3,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=ga,
        num_train_epochs=EPOCHS,
        learning_rate=LEARNING_RATE,
        optim="sgd",
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
        train_sampling_strategy=strategy,
        remove_unused_columns=False,
        logging_steps=1,
    )
    collator = RecordingCollator()
    model = tiny_gpt2(dropout=0.0)
    Trainer(model=model, args=args, train_dataset=dataset(), data_collator=collator).train()
    return collator.batches, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """Every strategy trained on 2 processes: per strategy, each rank's ``{"batches", "state"}``."""
    out = tmp_path_factory.mktemp("ddp_train")
    logs = run_ranks(__file__, [str(out)], world=WORLD)
    runs: dict[str, list] = {
        s: [torch.load(out / f"{s}_rank{r}.pt", weights_only=True) for r in range(WORLD)] for s in STRATEGIES
    }
    runs["logs"] = [text for _, text in logs]
    return runs


def test_no_rank_prints_a_deprecation_warning(ddp_runs) -> None:
    """The logged loss is gathered with torch's own collective: no rank prints the deprecation warning of
    torch.distributed.nn.functional.all_gather (Lightning's strategy.all_gather), as under transformers."""
    for text in ddp_runs["logs"]:
        assert "all_gather is deprecated" not in text


def steps_of(rank_runs: list[dict]) -> list[list[int]]:
    """The samples of each optimizer step: the union of every rank's GA micro-batches of that step."""
    per_rank = [run["batches"] for run in rank_runs]
    steps = []
    for step in range(len(per_rank[0]) // GA):
        steps.append(
            [i for batches in per_rank for batch in batches[step * GA : (step + 1) * GA] for i in batch]
        )
    return steps


def expected_batches(strategy: str, rank: int, epoch: int) -> list[list[int]]:
    """The micro-batches the standalone sampler yields for ``rank`` in ``epoch``."""
    from hf_lightning.adapters.samplers import build_train_sampler

    sampler, batch_sampler = build_train_sampler(
        strategy,
        lengths(),
        batch_size=BATCH,
        gradient_accumulation_steps=GA,
        num_replicas=WORLD,
        rank=rank,
        seed=3,
    )
    source = batch_sampler if batch_sampler is not None else sampler
    source.set_epoch(epoch)
    if batch_sampler is not None:
        return [list(b) for b in batch_sampler]
    order = list(sampler)
    return [order[i : i + BATCH] for i in range(0, len(order), BATCH)]


def reference_weights(steps: list[list[int]]) -> dict:
    """A plain torch loop: per step, the per-token mean loss over its samples, each run unpadded."""
    model = tiny_gpt2(dropout=0.0)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    data = dataset()
    for samples in steps:
        targets = sum(len(data[i]["input_ids"]) - 1 for i in samples)
        for i in samples:
            ids = data[i]["input_ids"].unsqueeze(0)
            logits = model(input_ids=ids).logits[0, :-1]
            loss = nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum") / targets
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    return model.state_dict()


def assert_same_weights(ours: dict, theirs: dict) -> None:
    for name, value in theirs.items():
        torch.testing.assert_close(ours[name], value, atol=1e-5, rtol=0, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_step_sees_its_effective_batch_once(ddp_runs, strategy: str) -> None:
    """Each step holds per_device × GA × world distinct samples; each epoch covers the dataset once."""
    steps = steps_of(ddp_runs[strategy])
    assert len(steps) == STEPS_PER_EPOCH * EPOCHS
    for samples in steps:
        assert len(samples) == EFFECTIVE and len(set(samples)) == EFFECTIVE
    for epoch in range(EPOCHS):
        seen = [
            i for samples in steps[epoch * STEPS_PER_EPOCH : (epoch + 1) * STEPS_PER_EPOCH] for i in samples
        ]
        assert sorted(seen) == list(range(SIZE))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_ranks_see_the_samplers_micro_batches_per_epoch(ddp_runs, strategy: str) -> None:
    """Each rank's micro-batches are its sampler's for epochs 0 and 1 (set_epoch reached; orders differ)."""
    per_epoch = STEPS_PER_EPOCH * GA
    for rank, run in enumerate(ddp_runs[strategy]):
        batches = [list(b) for b in run["batches"]]
        epochs = [batches[e * per_epoch : (e + 1) * per_epoch] for e in range(EPOCHS)]
        assert epochs == [expected_batches(strategy, rank, e) for e in range(EPOCHS)]
        assert epochs[0] != epochs[1]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_ranks_end_with_equal_weights(ddp_runs, strategy: str) -> None:
    """Both ranks hold the same weights after training (gradients were synchronised)."""
    first, second = (run["state"] for run in ddp_runs[strategy])
    for name in first:
        torch.testing.assert_close(first[name], second[name], atol=0, rtol=0)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_ddp_weights_equal_per_token_mean_reference(ddp_runs, strategy: str) -> None:
    """The weights equal a one-process loop on each step's samples with the global per-token mean."""
    assert_same_weights(ddp_runs[strategy][0]["state"], reference_weights(steps_of(ddp_runs[strategy])))


@pytest.mark.parametrize("strategy", ["random", "batch_rebalance"])
def test_ddp_weights_equal_single_process_trainer(ddp_runs, tmp_path, strategy: str) -> None:
    """2 processes × (per_device, GA) train like 1 process × (per_device, GA × 2) on the same steps."""
    batches, state = train(strategy, str(tmp_path), BATCH, GA * WORLD)
    single_steps = [
        sorted(i for b in batches[s * GA * WORLD : (s + 1) * GA * WORLD] for i in b)
        for s in range(len(batches) // (GA * WORLD))
    ]
    assert single_steps == [sorted(samples) for samples in steps_of(ddp_runs[strategy])]
    assert_same_weights(ddp_runs[strategy][0]["state"], state)


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    for name in STRATEGIES:
        seen, weights = train(name, str(target / name), BATCH, GA)
        torch.save({"batches": seen, "state": weights}, target / f"{name}_rank{rank}.pt")
