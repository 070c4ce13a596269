"""The helpers of ``transformers.trainer_pt_utils`` that scripts and tests import by that path: the same results
from ``hf_lightning.trainer_pt_utils`` on the same inputs (samplers, shards, parameter names, padding, the
evaluation container)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers.trainer_pt_utils as theirs
from torch import nn

import hf_lightning.trainer_pt_utils as ours


class _Stream(torch.utils.data.IterableDataset):
    """A stream of random length drawn from its own generator (reseeded by ``IterableDatasetShard.set_epoch``)."""

    def __init__(self) -> None:
        self.generator = torch.Generator()

    def __iter__(self):
        count = 0
        while count < 200:
            yield count
            count += 1
            if torch.rand(1, generator=self.generator).item() < 0.03:
                return


SHARDS = [(4, True, 2), (4, False, 2), (4, True, 3), (4, False, 3), (3, False, 4), (5, False, 1)]


@pytest.mark.parametrize(("batch_size", "drop_last", "processes"), SHARDS)
@pytest.mark.parametrize("size", [1, 7, 64, 123])
def test_shard_sampler_and_a_sized_shard(batch_size, drop_last, processes, size):
    for rank in range(processes):
        kwargs = dict(batch_size=batch_size, drop_last=drop_last, num_processes=processes, process_index=rank)
        data = list(range(size))
        a, b = theirs.ShardSampler(data, **kwargs), ours.ShardSampler(data, **kwargs)
        assert list(b) == list(a) and len(b) == len(a)
        a, b = theirs.IterableDatasetShard(data, **kwargs), ours.IterableDatasetShard(data, **kwargs)
        assert list(b) == list(a) and len(b) == len(a) and b.num_examples == a.num_examples


@pytest.mark.parametrize(("batch_size", "drop_last", "processes"), SHARDS)
@pytest.mark.parametrize("epoch", [0, 42])
def test_iterable_dataset_shard_of_a_seeded_stream(batch_size, drop_last, processes, epoch):
    for rank in range(processes):
        kwargs = dict(batch_size=batch_size, drop_last=drop_last, num_processes=processes, process_index=rank)
        shards = [
            theirs.IterableDatasetShard(_Stream(), **kwargs),
            ours.IterableDatasetShard(_Stream(), **kwargs),
        ]
        for shard in shards:
            shard.set_epoch(epoch)
        a, b = (list(shard) for shard in shards)
        assert b == a and len(b) % batch_size == 0
        assert shards[1].num_examples == shards[0].num_examples


@pytest.mark.parametrize("size", [5, 23, 64, 123])
@pytest.mark.parametrize("replicas", [2, 3])
def test_distributed_sampler_with_loop(size, replicas):
    for rank in range(replicas):
        samplers = [
            module.DistributedSamplerWithLoop(list(range(size)), 16, num_replicas=replicas, rank=rank, seed=3)
            for module in (theirs, ours)
        ]
        for sampler in samplers:
            sampler.set_epoch(1)
        assert list(samplers[1]) == list(samplers[0])


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.ln = nn.LayerNorm(4)
        self.rmsnorm = nn.Module()
        self.rmsnorm.weight = nn.Parameter(torch.ones(4))
        self.bias = nn.Parameter(torch.zeros(4))


@pytest.mark.parametrize(
    ("types", "names"),
    [
        ([nn.LayerNorm], None),
        ([], ["bias", "rmsnorm"]),
        ([nn.LayerNorm], [r"^bias", r"linear\.w"]),
        ([], None),
    ],
)
def test_get_parameter_names(types, names):
    model = nn.Sequential(_Block(), nn.ModuleList([_Block(), _Block()]))
    expected = theirs.get_parameter_names(model, types, names)
    assert ours.get_parameter_names(model, types, names) == expected
    assert expected  # the case keeps some names


def test_pad_and_concatenate():
    assert torch.equal(
        ours.torch_pad_and_concatenate(torch.tensor(1.0), torch.tensor(2.0)), torch.tensor([1.0, 2.0])
    )
    assert np.array_equal(
        ours.numpy_pad_and_concatenate(1.0, 2.0), theirs.numpy_pad_and_concatenate(1.0, 2.0)
    )
    a, b = torch.ones(2, 3), torch.zeros(1, 5)
    assert torch.equal(ours.torch_pad_and_concatenate(a, b, 7), theirs.torch_pad_and_concatenate(a, b, 7))
    assert np.array_equal(
        ours.numpy_pad_and_concatenate(a.numpy(), b.numpy()),
        theirs.numpy_pad_and_concatenate(a.numpy(), b.numpy()),
    )


def _same(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _same(a[key], b[key])
    else:
        assert a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("concat", [True, False])
@pytest.mark.parametrize("batches", [0, 1, 3])
def test_eval_loop_container(concat, batches):
    def batch(rows: int, width: int) -> list:
        return [
            torch.ones(rows, 5),
            {"loss": torch.tensor(float(rows))},
            (torch.ones(rows, 2, 3), torch.ones(rows, width)),
        ]

    containers = [
        module.EvalLoopContainer(do_nested_concat=concat, padding_index=-100) for module in (theirs, ours)
    ]
    for index in range(batches):
        for container in containers:
            container.add(batch(8 - index, 2 + 2 * index))
            if index == 1:
                container.to_cpu_and_numpy()
    a, b = (container.get_arrays() for container in containers)
    if batches == 0:
        assert a is None and b is None
    else:
        _same(a, b)


def test_accelerator_config_is_built_and_passed_as_transformers(tmp_path):
    """``AcceleratorConfig(**fields)`` / ``from_json_file``: the same keys and defaults as transformers' dataclass,
    an unknown keyword refused alike, and accepted as ``accelerator_config`` with the same effect."""
    import json

    import transformers

    import hf_lightning

    for fields in ({}, {"split_batches": True}, {"even_batches": False, "non_blocking": True}):
        assert ours.AcceleratorConfig(**fields).to_dict() == theirs.AcceleratorConfig(**fields).to_dict()
    path = tmp_path / "accelerator.json"
    path.write_text(json.dumps({"split_batches": True, "dispatch_batches": False}))
    assert (
        ours.AcceleratorConfig.from_json_file(path).to_dict()
        == theirs.AcceleratorConfig.from_json_file(path).to_dict()
    )
    messages = []
    for module in (ours, theirs):
        with pytest.raises(TypeError) as info:
            module.AcceleratorConfig(bogus=1)
        messages.append(str(info.value).split(".")[-1])
    assert messages[0] == messages[1]
    built = [
        library.TrainingArguments(
            str(tmp_path), use_cpu=True, accelerator_config=module.AcceleratorConfig(split_batches=True)
        ).accelerator_config
        for library, module in ((hf_lightning, ours), (transformers, theirs))
    ]
    assert built[0].split_batches is built[1].split_batches is True
    assert built[0].to_dict().items() <= built[1].to_dict().items()


@pytest.mark.parametrize("local_rank", [-1, 0, 1, 3])
def test_torch_distributed_zero_first_waits_where_transformers_waits(monkeypatch, local_rank):
    """The block runs first on local rank 0: the others wait at a barrier before it, rank 0 after it."""
    events: list[str] = []
    monkeypatch.setattr(torch.distributed, "barrier", lambda *a, **k: events.append("barrier"))
    orders = []
    for module in (theirs, ours):
        events.clear()
        with module.torch_distributed_zero_first(local_rank):
            events.append("block")
        orders.append(list(events))
    assert orders[1] == orders[0]


def test_the_schedules_and_zero_first_import_from_the_top_level():
    """transformers' top-level names of ``optimization`` and ``trainer_pt_utils`` import from ``hf_lightning``."""
    import transformers

    import hf_lightning

    for module in ("optimization", "trainer_pt_utils"):
        for name in transformers._import_structure[module]:
            assert getattr(hf_lightning, name) is not None, name
