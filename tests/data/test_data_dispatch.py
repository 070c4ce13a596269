"""DispatchedBatches: each data-parallel process's share of an IterableDataset, as accelerate dispatches it.

The processes are simulated by iterating once per rank; every rank reads the same stream. The real
2-process run against transformers is in tests/adapters/test_iterable_ddp.py.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from hf_lightning.data.dispatch import DispatchedBatches


class Stream(IterableDataset):
    """Samples ``{"x": i}`` for i in range(n), in an order drawn from ``generator`` when ``shuffle``."""

    def __init__(self, n: int, shuffle: bool = False) -> None:
        self.n, self.shuffle = n, shuffle
        self.generator = torch.Generator()

    def __iter__(self):
        order = torch.randperm(self.n, generator=self.generator).tolist() if self.shuffle else range(self.n)
        for i in order:
            yield {"x": torch.tensor(i)}


def shares(
    n: int,
    batch_size: int,
    world: int,
    drop_last: bool = False,
    epoch: int = 0,
    dataset: IterableDataset | None = None,
) -> list[list[list[int]]]:
    """Per rank, the sample ids of each batch it gets."""
    out = []
    for rank in range(world):
        loader = DataLoader(dataset or Stream(n), batch_size=batch_size, drop_last=drop_last)
        dispatched = DispatchedBatches(loader, world, rank, drop_last=drop_last, seed=5)
        dispatched.set_epoch(epoch)
        out.append([batch["x"].tolist() for batch in dispatched])
    return out


def test_full_groups_give_rank_r_the_rth_batch_and_the_tail_is_split_evenly():
    # Stream batches [0,1] [2,3] [4,5] [6,7] [8,9]: the last group holds one batch, split row by row.
    assert shares(10, 2, 2) == [[[0, 1], [4, 5], [8]], [[2, 3], [6, 7], [9]]]


def test_an_uneven_tail_is_completed_with_the_first_rows_of_the_epoch():
    # Last group [8,9] + [10]: 3 rows for 2 processes -> rows 0, 1 of the epoch complete it, 2 rows each.
    assert shares(11, 2, 2) == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [10, 0]]]


def test_the_first_rows_come_from_the_joined_first_group():
    # Batch size 1, 3 processes: the first group is [0] [1] [2]; the tail [3] [4] takes rows 0 of it.
    assert shares(5, 1, 3) == [[[0], [3]], [[1], [4]], [[2], [0]]]


def test_every_sample_is_trained_once_per_epoch_when_the_stream_divides():
    got = shares(24, 3, 2)
    flat = sorted(x for rank in got for batch in rank for x in batch)
    assert flat == list(range(24))


def test_drop_last_drops_the_incomplete_last_group():
    # DataLoader drops [10]; the group [8,9] alone cannot serve both processes and is dropped too.
    assert shares(11, 2, 2, drop_last=True) == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]


def test_generator_is_seeded_per_epoch_so_every_process_reads_the_same_order():
    stream = Stream(8, shuffle=True)
    epoch0 = shares(8, 2, 2, dataset=stream)
    epoch1 = shares(8, 2, 2, dataset=stream, epoch=1)
    again0 = shares(8, 2, 2, dataset=stream)
    assert epoch0 == again0 != epoch1
    expected = torch.randperm(8, generator=torch.Generator().manual_seed(5 + 1)).tolist()
    assert epoch1[0][0] == expected[:2] and epoch1[1][0] == expected[2:4]


def test_set_epoch_reaches_a_dataset_that_has_one():
    class EpochStream(Stream):
        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

    stream = EpochStream(4)
    dispatched = DispatchedBatches(DataLoader(stream, batch_size=2), 2, 0)
    dispatched.set_epoch(3)
    assert stream.epoch == 3


def test_tail_batches_of_different_widths_raise_a_clear_error():
    def pad_to_index(batch):
        width = 1 + int(batch[0]["x"])
        return {"input_ids": torch.zeros(len(batch), width)}

    # Widths 1, 3, 5: the tail [4] is completed with rows of the first group, whose batches cannot be joined.
    loader = DataLoader(Stream(5), batch_size=2, collate_fn=pad_to_index)
    with pytest.raises(ValueError, match="dataloader_drop_last"):
        list(DispatchedBatches(loader, 2, 0))


def test_a_rank_outside_the_world_is_refused():
    with pytest.raises(ValueError, match="process_index=2"):
        DispatchedBatches([], 2, 2)


def test_dataloader_drop_last_drops_the_last_partial_batch_of_a_stream(tmp_path):
    """Single process: the stream [0..4] in batches of 2 trains on [4] only without dataloader_drop_last."""
    from torch import nn

    import hf_lightning

    class Recording(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(()))
            self.seen: list[list[int]] = []

        def forward(self, x, labels=None):
            self.seen.append(x.tolist())
            return ((self.w * x.float() - labels).pow(2).mean(),)

    class Labelled(Stream):
        def __iter__(self):
            for item in super().__iter__():
                yield {**item, "labels": item["x"].float()}

    seen = {}
    for drop in (False, True):
        model = Recording()
        args = hf_lightning.TrainingArguments(
            str(tmp_path / str(drop)),
            per_device_train_batch_size=2,
            max_steps=4,
            dataloader_drop_last=drop,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            use_cpu=True,
        )
        hf_lightning.Trainer(model=model, args=args, train_dataset=Labelled(5)).train()
        seen[drop] = model.seen
    assert seen[False] == [[0, 1], [2, 3], [4], [0, 1]]
    assert seen[True] == [[0, 1], [2, 3], [0, 1], [2, 3]]


def test_total_batch_size_counts_every_process():
    """A dispatched stream's ``total_batch_size`` is one step's batch over every process, as accelerate's."""
    assert DispatchedBatches(DataLoader(list(range(10)), batch_size=3), 2, 1).total_batch_size == 6
    assert DispatchedBatches([[1, 2]], 2, 0).total_batch_size is None  # a plain iterable: unknown
