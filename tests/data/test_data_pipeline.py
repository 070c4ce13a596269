"""The training data pipeline of ``hf_lightning.Trainer``: columns, lengths, workers, samplers, epochs, resume.

A tiny GPT-2 trains on variable-length token sequences; a padding collator records what reaches it (the
feature keys, and the sample indices of each micro-batch when the items carry an ``idx``).
"""

from __future__ import annotations

import logging

import datasets
import pytest
import torch
from torch.utils.data import IterableDataset

import hf_lightning.adapters.samplers as samplers_module
from hf_lightning import Trainer, TrainingArguments
from hf_lightning.adapters.plan import to_lightning
from tests.tiny import tiny_gpt2

LENGTHS = [3, 9, 5, 12, 4, 7, 10, 6, 8, 11, 3, 6]


class PadCollator:
    """Right-pads ``input_ids`` (labels -100 on padding); records feature keys and ``idx`` batches."""

    def __init__(self) -> None:
        self.keys: list[list[str]] = []
        self.batches: list[list[int]] = []

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        self.keys.append(sorted(features[0]))
        if "idx" in features[0]:
            self.batches.append([int(f["idx"]) for f in features])
        width = max(len(f["input_ids"]) for f in features)
        ids = torch.zeros(len(features), width, dtype=torch.long)
        mask = torch.zeros(len(features), width, dtype=torch.long)
        for row, f in enumerate(features):
            ids[row, : len(f["input_ids"])] = torch.as_tensor(f["input_ids"])
            mask[row, : len(f["input_ids"])] = 1
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def token_lists(lengths: list[int] = LENGTHS) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(1, 256, (n,), generator=g).tolist() for n in lengths]


def indexed_data(lengths: list[int] = LENGTHS) -> list[dict]:
    """A torch (list) dataset whose items carry their own index."""
    return [{"input_ids": torch.tensor(ids), "idx": i} for i, ids in enumerate(token_lists(lengths))]


def hf_dataset(length_column: list[int] | None = None) -> datasets.Dataset:
    """A ``datasets.Dataset`` with extra string columns (and, if given, a precomputed length column)."""
    ids = token_lists()
    columns = {
        "input_ids": ids,
        "text": [f"sample {i}" for i in range(len(ids))],
        "source": ["web"] * len(ids),
    }
    if length_column is not None:
        columns["length"] = length_column
    return datasets.Dataset.from_dict(columns)


def make_trainer(tmp_path, train_dataset, collator: PadCollator, **overrides) -> Trainer:
    kwargs = dict(
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        save_strategy="no",
        seed=7,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        num_train_epochs=2,
        learning_rate=0.01,
        remove_unused_columns=False,
    )
    kwargs.update(overrides)
    args = TrainingArguments(str(tmp_path), **kwargs)
    return Trainer(
        model=tiny_gpt2(dropout=0.0), args=args, train_dataset=train_dataset, data_collator=collator
    )


def per_epoch(batches: list[list[int]], size: int = len(LENGTHS), batch: int = 2) -> list[list[list[int]]]:
    count = -(-size // batch)
    return [batches[i : i + count] for i in range(0, len(batches), count)]


# --- dataloader options --------------------------------------------------------------------


def test_no_pinning_and_no_pin_memory_warning_without_an_accelerator(tmp_path, monkeypatch, recwarn) -> None:
    """Without CUDA the training DataLoader does not pin (transformers' pins and torch warns; docs/divergences.md)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    trainer = make_trainer(tmp_path, indexed_data(), PadCollator(), use_cpu=False)
    loader = trainer.get_train_dataloader()
    assert trainer.args.dataloader_pin_memory is True and loader.pin_memory is False
    next(iter(loader))
    assert not [w for w in recwarn if "pin_memory" in str(w.message)]


# --- remove_unused_columns -----------------------------------------------------------------


def test_datasets_extra_string_columns_are_dropped_and_named(tmp_path, caplog) -> None:
    """remove_unused_columns drops string columns forward does not take, logs them, and trains."""
    collator = PadCollator()
    trainer = make_trainer(tmp_path, hf_dataset(), collator, remove_unused_columns=True)
    with caplog.at_level(logging.INFO, logger="hf_lightning.data"):
        output = trainer.train()
    assert output.global_step == 6
    assert {tuple(keys) for keys in collator.keys} == {("input_ids",)}
    dropped = [r.getMessage() for r in caplog.records if "have been ignored" in r.getMessage()]
    assert dropped == [
        "The following columns in the Training set don't have a corresponding argument in "
        "`GPT2LMHeadModel.forward` and have been ignored: text, source. If text, source are not expected by "
        "`GPT2LMHeadModel.forward`,  you can safely ignore this message."
    ]  # transformers' line, word for word


def test_extra_columns_reach_the_collator_when_kept(tmp_path) -> None:
    """With remove_unused_columns=False every column, strings included, reaches the data collator."""
    collator = PadCollator()
    make_trainer(tmp_path, hf_dataset(), collator, remove_unused_columns=False, max_steps=1).train()
    assert collator.keys[0] == ["input_ids", "source", "text"]


@pytest.mark.parametrize("strategy", ["group_by_length", "batch_rebalance"])
def test_length_column_is_used_although_it_is_dropped(tmp_path, monkeypatch, strategy: str) -> None:
    """docs/divergences.md divergence 2: the length column feeds the sampler, read once; the dataset is never re-scanned."""
    column = [100 - n for n in LENGTHS]  # deliberately not len(input_ids): a re-scan would show
    reads: list[str] = []
    original_getitem = datasets.Dataset.__getitem__

    def spy(self, key):
        if isinstance(key, str):
            reads.append(key)
        return original_getitem(self, key)

    received: list[list[int]] = []
    original_build = samplers_module.build_train_sampler

    def build(strategy, lengths, **kwargs):
        received.append(list(lengths))
        return original_build(strategy, lengths, **kwargs)

    monkeypatch.setattr(datasets.Dataset, "__getitem__", spy)
    monkeypatch.setattr(samplers_module, "build_train_sampler", build)
    collator = PadCollator()
    trainer = make_trainer(
        tmp_path, hf_dataset(column), collator, remove_unused_columns=True, train_sampling_strategy=strategy
    )
    trainer.train()
    assert received == [column]
    assert reads == ["length"]  # one column read for both epochs; input_ids never scanned
    assert {tuple(keys) for keys in collator.keys} == {("input_ids",)}


# --- dataloader options ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, {"num_workers": 0, "persistent_workers": False, "prefetch_factor": None}),
        (
            {
                "dataloader_num_workers": 2,
                "dataloader_persistent_workers": True,
                "dataloader_prefetch_factor": 3,
            },
            {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 3},
        ),
        (
            {"dataloader_num_workers": 1, "dataloader_multiprocessing_context": "spawn"},
            {"num_workers": 1, "multiprocessing_context": "spawn"},
        ),
        ({"dataloader_num_workers": 1, "dataloader_in_order": False}, {"in_order": False}),
        ({"dataloader_drop_last": True}, {"drop_last": True}),
    ],
    ids=["defaults", "persistent-prefetch", "spawn", "out-of-order", "drop-last"],
)
def test_dataloader_options_come_from_the_arguments(tmp_path, overrides: dict, expected: dict) -> None:
    """get_train_dataloader builds its DataLoader from the dataloader_* arguments."""
    loader = make_trainer(tmp_path, indexed_data(), PadCollator(), **overrides).get_train_dataloader()
    for name, value in expected.items():
        actual = getattr(loader, name)
        if name == "multiprocessing_context":
            actual = actual.get_start_method()
        assert actual == value, name


def _final_weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def test_persistent_workers_train_and_resume(tmp_path) -> None:
    """Two persistent loader workers: training runs, and a resumed run ends with the uninterrupted weights."""
    workers = dict(
        dataloader_num_workers=2, dataloader_persistent_workers=True, save_strategy="steps", save_steps=4
    )
    full = make_trainer(tmp_path / "full", indexed_data(), PadCollator(), **workers)
    assert full.train().global_step == 6
    resumed = make_trainer(tmp_path / "resumed", indexed_data(), PadCollator(), **workers)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-4"))
    assert resumed.state.global_step == 6
    ours, theirs = _final_weights(resumed), _final_weights(full)
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], atol=1e-6, rtol=0)


# --- IterableDataset ------------------------------------------------------------------------


class Stream(IterableDataset):
    """An IterableDataset of the indexed samples, in order."""

    def __iter__(self):
        return iter(indexed_data())


def test_iterable_dataset_without_max_steps_names_max_steps(tmp_path) -> None:
    """An IterableDataset has no length to count epochs: Trainer() asks for max_steps, as transformers; a
    dataset without length given later (trainer.train_dataset = ...) is refused by train()."""
    with pytest.raises(ValueError, match=r"max_steps"):
        make_trainer(tmp_path, Stream(), PadCollator())
    trainer = make_trainer(tmp_path, None, PadCollator())
    trainer.train_dataset = Stream()
    with pytest.raises(ValueError, match=r"max_steps"):
        trainer.train()


@pytest.mark.parametrize("strategy", ["group_by_length", "batch_rebalance"])
def test_length_strategies_are_ignored_with_a_warning_for_iterable_datasets(
    tmp_path, caplog, strategy
) -> None:
    """A length-aware strategy on an IterableDataset warns and reads the stream in its own order."""
    collator = PadCollator()
    trainer = make_trainer(tmp_path, Stream(), collator, max_steps=2, train_sampling_strategy=strategy)
    with caplog.at_level(logging.WARNING, logger="hf_lightning.trainer.data"):
        trainer.train()
    warnings = [r.getMessage() for r in caplog.records if "is ignored" in r.getMessage()]
    assert len(warnings) == 1 and strategy in warnings[0] and "IterableDataset" in warnings[0]
    # stream order; Lightning may fetch one window ahead of the 2 steps trained
    assert len(collator.batches) >= 4
    assert collator.batches == [[2 * i, 2 * i + 1] for i in range(len(collator.batches))]


# --- samplers -------------------------------------------------------------------------------


def test_batch_rebalance_refuses_tensor_parallelism(tmp_path) -> None:
    """batch_rebalance is data-parallel only: a tensor-parallel model (tp_size 2) gets a clear error."""
    trainer = make_trainer(tmp_path, indexed_data(), PadCollator(), train_sampling_strategy="batch_rebalance")
    trainer.model._tp_size = 2
    with pytest.raises(ValueError, match=r"train_sampling_strategy='batch_rebalance'.*tp_size=2"):
        trainer.get_train_dataloader()


def sampler_for(strategy: str, seed: int = 7):
    """The standalone sampler (or batch sampler) the Trainer builds for one process."""
    sampler, batch_sampler = samplers_module.build_train_sampler(
        strategy, LENGTHS, batch_size=2, gradient_accumulation_steps=2, num_replicas=1, rank=0, seed=seed
    )
    return batch_sampler if batch_sampler is not None else sampler


def expected_epoch(strategy: str, epoch: int, seed: int = 7) -> list[list[int]]:
    """The micro-batches the standalone sampler gives one process in ``epoch``."""
    source = sampler_for(strategy, seed)
    source.set_epoch(epoch)
    if strategy == "batch_rebalance":
        return [list(b) for b in source]
    order = list(source)
    return [order[i : i + 2] for i in range(0, len(order), 2)]


STRATEGIES = ["random", "sequential", "group_by_length", "batch_rebalance"]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_epoch_reaches_set_epoch(tmp_path, strategy: str) -> None:
    """Epoch e trains on the sampler's epoch-e order (a new one in epoch 2, except for sequential)."""
    collator = PadCollator()
    make_trainer(tmp_path, indexed_data(), collator, train_sampling_strategy=strategy).train()
    epochs = per_epoch(collator.batches)
    assert epochs == [expected_epoch(strategy, 0), expected_epoch(strategy, 1)]
    assert (epochs[0] == epochs[1]) == (strategy == "sequential")


def test_data_seed_sets_the_order_apart_from_seed(tmp_path) -> None:
    """data_seed, when given, seeds the sampler instead of seed."""
    collator = PadCollator()
    make_trainer(tmp_path, indexed_data(), collator, data_seed=11, max_steps=3).train()
    assert collator.batches == expected_epoch("random", 0, seed=11)


@pytest.mark.parametrize(("data_seed", "expected"), [(None, 7), (11, 11)])
def test_trainer_and_plan_seed_the_samplers_alike(tmp_path, data_seed, expected) -> None:
    """The Trainer's train sampler and the plan's ``DataSettings`` take one seed from seed / data_seed."""
    trainer = make_trainer(tmp_path, indexed_data(), PadCollator(), data_seed=data_seed)
    assert trainer._get_train_sampler().seed == to_lightning(trainer.args).data.sampler_seed == expected


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_sampler_order_is_a_pure_function_of_seed_and_epoch(strategy: str) -> None:
    """Epoch 1's order is the same whether the sampler went through epoch 0 first or is brand new."""
    used = sampler_for(strategy)
    list(used)
    used.set_epoch(1)
    fresh = sampler_for(strategy)
    fresh.set_epoch(1)
    assert list(used) == list(fresh)


@pytest.mark.parametrize("strategy", ["random", "group_by_length", "batch_rebalance"])
def test_resumed_run_trains_on_the_same_micro_batches(tmp_path, strategy: str) -> None:
    """Resuming mid-epoch 2 (step 4 of 6) trains on the micro-batches the uninterrupted run trained on."""
    full_collator, resumed_collator = PadCollator(), PadCollator()
    options = dict(train_sampling_strategy=strategy, save_strategy="steps", save_steps=4)
    make_trainer(tmp_path / "full", indexed_data(), full_collator, **options).train()
    resumed = make_trainer(tmp_path / "resumed", indexed_data(), resumed_collator, **options)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-4"))
    tail = full_collator.batches[4 * 2 :]  # micro-batches of steps 5 and 6
    assert resumed_collator.batches[-len(tail) :] == tail
    assert resumed.state.global_step == 6
