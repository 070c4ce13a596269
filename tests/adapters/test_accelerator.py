"""``trainer.accelerator`` answers as accelerate's ``Accelerator`` does, on one process (DDP: test_accelerator_ddp.py).

The oracle is the ``Accelerator`` transformers' own Trainer builds for the same arguments (its
``accelerator_config`` defaults included), given the same inputs: values, types and shapes are compared.
"""

from __future__ import annotations

import collections
from unittest.mock import patch

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from hf_lightning import Trainer, TrainingArguments
from hf_lightning.adapters.accelerator import LightningAccelerator
from tests.tiny import RegressionModel

accelerate = pytest.importorskip("accelerate")
transformers = pytest.importorskip("transformers")

Pair = collections.namedtuple("Pair", "first second")


@pytest.fixture(scope="module")
def accelerators(tmp_path_factory):
    """(accelerate's Accelerator as transformers' Trainer builds it, ours), for the same arguments."""
    out = str(tmp_path_factory.mktemp("acc"))
    theirs = transformers.Trainer(
        model=RegressionModel(), args=transformers.TrainingArguments(out, use_cpu=True, report_to="none")
    ).accelerator
    ours = Trainer(
        model=RegressionModel(), args=TrainingArguments(out, use_cpu=True, report_to="none")
    ).accelerator
    return theirs, ours


PROPERTIES = [
    "device", "num_processes", "process_index", "local_process_index", "is_main_process",
    "is_local_main_process", "is_last_process", "distributed_type", "mixed_precision", "use_distributed",
    "sync_gradients", "gradient_accumulation_steps", "split_batches", "dispatch_batches", "even_batches",
    "use_seedable_sampler", "non_blocking", "parallelism_config", "deepspeed_plugin", "is_fsdp2",
    "optimizer_step_was_skipped",
]  # fmt: skip
STATE = [
    "num_processes", "process_index", "local_process_index", "device", "distributed_type", "mixed_precision",
    "backend", "deepspeed_plugin", "parallelism_config", "use_distributed", "is_main_process",
    "is_local_main_process", "is_last_process", "initialized", "fork_launched", "debug",
]  # fmt: skip


@pytest.mark.parametrize("name", PROPERTIES)
def test_accelerator_property_matches_accelerate(accelerators, name):
    """Each process / configuration property has accelerate's value (and type: its own DistributedType)."""
    theirs, ours = accelerators
    assert getattr(ours, name) == getattr(theirs, name)
    assert type(getattr(ours, name)) is type(getattr(theirs, name))


@pytest.mark.parametrize("name", STATE)
def test_accelerator_state_matches_accelerate(accelerators, name):
    """``accelerator.state`` has ``AcceleratorState``'s names and values."""
    theirs, ours = accelerators
    assert getattr(ours.state, name) == getattr(theirs.state, name)


def test_state_repr_and_plugins_as_accelerate(accelerators):
    """The printed state is accelerate's; no FSDP plugin (``getattr(state, "fsdp_plugin", None)`` is None)."""
    theirs, ours = accelerators
    assert repr(ours.state) == repr(theirs.state)
    assert getattr(ours.state, "fsdp_plugin", None) is getattr(theirs.state, "fsdp_plugin", None) is None
    assert repr(ours.gradient_state) == repr(theirs.gradient_state)
    assert ours.gradient_state.plugin_kwargs == theirs.gradient_state.plugin_kwargs


def test_patching_state_changes_what_the_accelerator_reads(accelerators):
    """``patch.object(accelerator.state, "num_processes", 2)`` (transformers' tests do it) holds, then goes."""
    _, ours = accelerators
    with patch.object(ours.state, "num_processes", 2), patch.object(ours.state, "process_index", 1):
        assert (ours.num_processes, ours.process_index, ours.is_main_process, ours.is_last_process) == (
            2,
            1,
            False,
            True,
        )
    assert (ours.num_processes, ours.process_index, ours.is_main_process) == (1, 0, True)


def test_names_not_carried_raise_attribute_error_naming_them(accelerators):
    """An accelerate name not offered raises AttributeError saying so; hasattr / getattr defaults keep working."""
    theirs, ours = accelerators
    assert hasattr(theirs, "save_state")
    with pytest.raises(AttributeError, match=r"accelerate's `Accelerator.save_state` is not carried"):
        ours.save_state  # noqa: B018
    with pytest.raises(AttributeError, match=r"`AcceleratorState.megatron_lm_plugin` is not carried"):
        ours.state.megatron_lm_plugin  # noqa: B018
    assert getattr(ours, "save_state", "absent") == "absent" and not hasattr(ours, "no_such_thing")
    with pytest.raises(
        AttributeError, match=r"'LightningAccelerator' object has no attribute 'no_such_thing'"
    ):
        ours.no_such_thing  # noqa: B018


INPUTS = [
    torch.tensor(3.0),
    torch.arange(6.0),
    torch.arange(12).reshape(3, 4),
    {"a": torch.ones(2, 3), "b": [torch.zeros(1), (torch.tensor(1), torch.tensor([2, 3]))]},
    Pair(torch.ones(2), torch.zeros(3, 1)),
]


def _same(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


@pytest.mark.parametrize("data", INPUTS, ids=["0d", "1d", "2d", "nested", "namedtuple"])
@pytest.mark.parametrize(
    "op", ["gather", "gather_for_metrics", "reduce-sum", "reduce-mean", "reduce-max", "pad"]
)
def test_collectives_match_accelerate(accelerators, op, data):
    """gather, gather_for_metrics, reduce and pad_across_processes give accelerate's values, types and shapes."""
    theirs, ours = accelerators

    def call(acc):
        if op.startswith("reduce"):
            return acc.reduce(data, reduction=op.split("-")[1])
        if op == "pad":
            return acc.pad_across_processes(data, dim=0, pad_index=-1)
        return getattr(acc, op)(data)

    _same(call(ours), call(theirs))


def test_reduce_returns_a_copy_and_gather_for_metrics_takes_objects(accelerators):
    """reduce clones (as accelerate); objects go through gather_object (one process: as given)."""
    theirs, ours = accelerators
    tensor = torch.ones(2)
    assert ours.reduce(tensor) is not tensor
    for data in (["a", "b"], [{"x": 1}], torch.ones(2)):
        _same(
            ours.gather_for_metrics(data, use_gather_object=True),
            theirs.gather_for_metrics(data, use_gather_object=True),
        )
    _same(ours.gather_for_metrics(["a", "b"]), theirs.gather_for_metrics(["a", "b"]))


@pytest.mark.parametrize("inputs", [[1, 2, 3], ("a", "b"), torch.arange(5), {"k": [1, 2], "v": [3, 4]}])
@pytest.mark.parametrize("padding", [False, True])
def test_split_between_processes_matches_accelerate(accelerators, inputs, padding):
    theirs, ours = accelerators
    with (
        theirs.split_between_processes(inputs, apply_padding=padding) as a,
        ours.split_between_processes(inputs, apply_padding=padding) as b,
    ):
        _same(b, a)


def test_process_helpers_match_accelerate(accelerators, capsys):
    """print (local main only), main_process_first, local_main_process_first, wait_for_everyone, on_* decorators."""
    theirs, ours = accelerators
    for acc in (theirs, ours):
        acc.print("hello", 1)
        with acc.main_process_first(), acc.local_main_process_first():
            acc.wait_for_everyone()
    assert capsys.readouterr().out == "hello 1\nhello 1\n"
    for name in ("on_main_process", "on_local_main_process", "on_last_process"):
        assert getattr(ours, name)(len)([1, 2]) == getattr(theirs, name)(len)([1, 2]) == 2
    assert ours.on_process(len, process_index=0)([1]) == theirs.on_process(len, process_index=0)([1]) == 1
    assert ours.free_memory(1, 2) == theirs.free_memory(1, 2) == [None, None]


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_model_helpers_match_accelerate(accelerators, tmp_path):
    """unwrap_model, backward, clip_grad_norm_, clip_grad_value_, get_state_dict and save as accelerate."""
    theirs, ours = accelerators
    results = []
    for acc in (theirs, ours):
        model = _model()
        assert acc.unwrap_model(nn.DataParallel(model)) is model
        compiled = torch.compile(model)
        assert (
            acc.unwrap_model(compiled) is compiled
            and acc.unwrap_model(compiled, keep_torch_compile=False) is model
        )
        acc.backward(model(torch.ones(3, 4)).pow(2).sum())
        norm = acc.clip_grad_norm_(model.parameters(), 0.5)
        acc.clip_grad_value_(model.parameters(), 0.01)
        state = acc.get_state_dict(model)
        acc.save(state, tmp_path / "state.pt")
        acc.save(state, tmp_path / "state.safetensors", safe_serialization=True)
        from safetensors.torch import load_file

        results.append((norm, [p.grad.clone() for p in model.parameters()], state, load_file(tmp_path / "state.safetensors"),
                        torch.load(tmp_path / "state.pt", weights_only=True)))  # fmt: skip
    _same(results[1], results[0])


@pytest.mark.parametrize("precision", ["no", "bf16"])
def test_autocast_matches_accelerate(tmp_path, precision):
    """autocast: float32 without mixed precision; bfloat16 matmuls with bf16 (and off with enabled=False)."""
    from accelerate.state import AcceleratorState
    from accelerate.utils import AutocastKwargs

    AcceleratorState._reset_state(reset_partial_state=True)  # accelerate's state is a singleton
    theirs = accelerate.Accelerator(cpu=True, mixed_precision=precision)
    ours = LightningAccelerator(
        _settings(TrainingArguments(str(tmp_path), use_cpu=True, bf16=precision == "bf16", report_to="none"))
    )
    layer, x = nn.Linear(4, 4), torch.ones(2, 4)
    dtypes = []
    for acc in (theirs, ours):
        with acc.autocast():
            inside = layer(x).dtype
            with acc.autocast(AutocastKwargs(enabled=False)):
                off = layer(x).dtype
        dtypes.append((inside, off))
    AcceleratorState._reset_state(reset_partial_state=True)
    accelerate.Accelerator(cpu=True)  # the shared state the other tests' accelerators read, as before
    assert dtypes[1] == dtypes[0]
    assert dtypes[0][0] == (torch.bfloat16 if precision == "bf16" else torch.float32)


def _settings(args):
    from hf_lightning.adapters.accelerator_state import accelerator_settings

    return accelerator_settings(args, {})


def test_accumulate_and_no_sync_are_null_contexts_on_one_process(accelerators):
    """On one process accumulate / no_sync change nothing: the gradients are those of a plain backward."""
    theirs, ours = accelerators
    grads = []
    for acc in (theirs, ours):
        model = _model()
        with acc.accumulate(model), acc.no_sync(model):
            acc.backward(model(torch.ones(2, 4)).sum())
        grads.append([p.grad for p in model.parameters()])
    _same(grads[1], grads[0])


@pytest.mark.parametrize("shuffle", [False, True])
def test_prepare_gives_accelerate_batches_and_objects(accelerators, shuffle):
    """prepare(model, optimizer, loader): the model on the device, the optimizer, and the batches accelerate's
    prepared loader yields (a shuffled one through accelerate's seedable sampler) for two epochs."""
    theirs, ours = accelerators
    epochs = []
    for acc in (theirs, ours):
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(7)
        prepared_model, prepared_opt, loader = acc.prepare(
            model, optimizer, DataLoader(list(range(10)), batch_size=3, shuffle=shuffle)
        )
        assert (
            acc.unwrap_model(prepared_model) is model
            and next(prepared_model.parameters()).device == acc.device
        )
        assert getattr(prepared_opt, "optimizer", prepared_opt) is optimizer
        epochs.append(
            ([[b.tolist() for b in loader] for _ in range(2)], len(loader), loader.total_batch_size)
        )
    assert epochs[1] == epochs[0]
    assert acc.prepare_model(model, evaluation_mode=True) is model


def test_trainer_engine_flags_are_transformers(tmp_path):
    """is_deepspeed_enabled, is_fsdp_enabled, gather_function, place_model_on_device, can_return_loss, ... as
    transformers' Trainer sets them."""
    names = ["is_deepspeed_enabled", "is_fsdp_enabled", "is_fsdp_xla_enabled", "is_fsdp_xla_v1_enabled",
             "is_fsdp_xla_v2_enabled", "is_model_parallel", "is_distributed_loading_by_transformers",
             "place_model_on_device", "can_return_loss", "deepspeed", "is_in_train", "hp_search_backend",
             "model_accepts_loss_kwargs", "hub_model_id", "label_names",
             "loss_is_scaled_for_ga", "_signature_columns"]  # fmt: skip
    hf = transformers.Trainer(
        model=RegressionModel(),
        args=transformers.TrainingArguments(str(tmp_path), use_cpu=True, report_to="none"),
    )
    ours = Trainer(
        model=RegressionModel(), args=TrainingArguments(str(tmp_path), use_cpu=True, report_to="none")
    )
    assert {n: getattr(ours, n) for n in names} == {n: getattr(hf, n) for n in names}
    assert ours.model_wrapped is ours.model and ours.gather_function(torch.ones(2)).tolist() == [1.0, 1.0]


class _ReturnsLoss(nn.Module):
    def forward(self, x, return_loss: bool = True):
        return x


def test_can_return_loss_is_decided_from_the_model(tmp_path):
    """A forward with ``return_loss=True`` (CLIP-like) makes ``can_return_loss`` True, as in transformers."""
    args = TrainingArguments(str(tmp_path), use_cpu=True, report_to="none")
    assert Trainer(model=_ReturnsLoss(), args=args).can_return_loss is True


def test_sync_gradients_is_true_on_the_last_micro_batch_only(tmp_path):
    """During train() ``accelerator.sync_gradients`` is True on the micro-batch that completes a step."""
    from tests.tiny import regression_data

    seen = []

    class Watching(Trainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            seen.append(self.accelerator.sync_gradients)
            return super().training_step(model, inputs, num_items_in_batch)

    args = TrainingArguments(str(tmp_path), use_cpu=True, report_to="none", per_device_train_batch_size=4,
                             gradient_accumulation_steps=3, max_steps=2, save_strategy="no", disable_tqdm=True)  # fmt: skip
    Watching(model=RegressionModel(), args=args, train_dataset=regression_data(24)).train()
    assert seen == [False, False, True, False, False, True]


def test_training_arguments_distributed_state_and_deepspeed_plugin(tmp_path):
    """``args.distributed_state`` and ``args.deepspeed_plugin`` (TRL reads them) answer as transformers'; with a
    DeepSpeed configuration the plugin carries it and its ZeRO stage."""
    theirs = transformers.TrainingArguments(str(tmp_path), use_cpu=True, report_to="none")
    ours = TrainingArguments(str(tmp_path), use_cpu=True, report_to="none")
    assert ours.deepspeed_plugin is theirs.deepspeed_plugin is None
    for name in ("distributed_type", "num_processes", "process_index", "local_process_index", "device",
                 "is_main_process", "is_local_main_process", "use_distributed"):  # fmt: skip
        assert getattr(ours.distributed_state, name) == getattr(theirs.distributed_state, name), name
    for state in (ours.distributed_state, theirs.distributed_state):  # PartialState's methods, one process
        state.wait_for_everyone()
        with state.main_process_first(), state.local_main_process_first():
            state.print("main process first")
    assert ours.distributed_state.initialized is theirs.distributed_state.initialized is True
    config = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}
    plugin = TrainingArguments(
        str(tmp_path), use_cpu=True, report_to="none", deepspeed=config
    ).deepspeed_plugin
    assert (plugin.zero_stage, plugin.deepspeed_config) == (2, config)


def test_replacing_the_scaler_raises_naming_it():
    """``trainer.accelerator.scaler = GradScaler(...)`` (accelerate lets a test swap it) raises AttributeError
    naming ``scaler``: the scaler is the fit's precision plugin's."""
    accelerator = LightningAccelerator()
    with pytest.raises(AttributeError, match=r"trainer\.accelerator\.scaler can't be replaced"):
        accelerator.scaler = torch.amp.GradScaler("cpu")
    assert accelerator.scaler is None and accelerator.grad_scaler is None
