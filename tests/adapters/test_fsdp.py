"""FSDP: ``fsdp``/``fsdp_config`` become Lightning's FSDP strategies; FSDP2 and FSDP1 train on 2 CPU processes.

The translation tests read ``to_lightning(args)``. The slow tests launch ``tests/fsdp_worker.py`` as 2
gloo processes and compare with the same run under DDP.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from hf_lightning import TrainingArguments
from hf_lightning.adapters.fsdp import FSDPSettings, fsdp_settings, wraps_module
from hf_lightning.adapters.plan import to_lightning
from tests.tiny import tiny_gpt2

TWO = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}


def _args(tmp_path, **kwargs) -> TrainingArguments:
    return TrainingArguments(str(tmp_path), use_cpu=True, report_to="none", **kwargs)


def test_fsdp_true_plans_model_parallel_strategy(tmp_path) -> None:
    """``fsdp=True`` (FSDP2, transformers' default) plans a ModelParallelStrategy over the whole world."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    plan = to_lightning(_args(tmp_path, fsdp=True), env=TWO)
    assert isinstance(plan.strategy, ModelParallelStrategy)
    assert plan.strategy._data_parallel_size == 2 and plan.strategy._tensor_parallel_size == 1
    assert "fully_shard(reshard_after_forward=True" in plan.describe()


def test_legacy_words_fold_into_fsdp2_settings(tmp_path) -> None:
    """``fsdp="shard_grad_op offload auto_wrap"`` gives reshard_after_forward=False and CPU offload."""
    settings = fsdp_settings(_args(tmp_path, fsdp="shard_grad_op offload auto_wrap"))
    assert settings is not None
    assert (settings.version, settings.reshard_after_forward, settings.cpu_offload) == (2, False, True)


def test_fsdp_off_plans_no_fsdp(tmp_path) -> None:
    """Without ``fsdp`` the plan has no FSDP settings and one process keeps Lightning's 'auto'."""
    plan = to_lightning(_args(tmp_path))
    assert plan.distributed.fsdp is None and plan.strategy == "auto"


def test_version_1_plans_fsdp_strategy_with_its_options(tmp_path) -> None:
    """``fsdp_config['version']=1`` plans an FSDPStrategy with sharding, prefetch and offload from the config."""
    from lightning.pytorch.strategies import FSDPStrategy
    from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy

    config = {"version": 1, "backward_prefetch": "backward_pre", "use_orig_params": "false"}
    plan = to_lightning(_args(tmp_path, fsdp="hybrid_shard offload", fsdp_config=config), env=TWO)
    strategy = plan.strategy
    assert isinstance(strategy, FSDPStrategy)
    assert strategy.sharding_strategy == ShardingStrategy.HYBRID_SHARD
    assert strategy.cpu_offload.offload_params is True
    assert strategy.kwargs["backward_prefetch"] == BackwardPrefetch.BACKWARD_PRE
    assert strategy.kwargs["use_orig_params"] is False


def test_version_1_strategy_shards_the_hf_model_on_any_device(tmp_path) -> None:
    """FSDP1 plans ``FSDP1Strategy`` (Lightning's FSDPStrategy, which the GPU-only check does not stop on CPU),
    with activation checkpointing applied to the layers the wrap policy picks."""
    from lightning.pytorch.strategies import FSDPStrategy

    from hf_lightning.adapters.fsdp1_module import FSDP1Strategy

    config = {"version": 1, "activation_checkpointing": True}
    strategy = to_lightning(_args(tmp_path, fsdp="full_shard", fsdp_config=config), env=TWO).strategy
    assert isinstance(strategy, FSDP1Strategy) and type(strategy) is not FSDPStrategy
    assert strategy.checkpointing is not None and strategy.checkpointing.activation_checkpointing


@pytest.mark.parametrize(
    ("config", "extra", "named"),
    [
        ({"use_orig_params": "false"}, {}, "use_orig_params"),
        ({}, {"torch_compile": True}, "torch_compile"),
    ],
)
def test_fsdp1_refuses_what_it_does_not_honour(tmp_path, config, extra, named) -> None:
    """FSDP1 training refuses ``use_orig_params=False`` and ``torch_compile`` by name, before any work."""
    from hf_lightning.adapters.fit import _module_class

    args = _args(tmp_path, fsdp="full_shard", fsdp_config={"version": 1, **config}, **extra)
    with pytest.raises(NotImplementedError, match=named):
        _module_class(to_lightning(args, env=TWO))


def test_fsdp1_size_policy_leaves_tied_weights_to_the_parent() -> None:
    """FSDP1's size-based policy is torch's, except that a module holding a weight tied outside it (GPT-2's
    ``transformer``, whose ``wte`` is ``lm_head``'s weight) is not wrapped apart."""
    from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy

    from hf_lightning.adapters.fsdp import _V1WrapPolicy

    settings = FSDPSettings(
        1, "full_shard", False, "SIZE_BASED_WRAP", 20000, None, "FULL_STATE_DICT", False, False
    )
    model = tiny_gpt2()
    policy = _V1WrapPolicy(settings)
    assert policy(model, True, 60000)  # recurse into a large module
    assert not policy(model.transformer, False, 40000)
    assert size_based_auto_wrap_policy(model.transformer, False, 40000, min_num_params=20000)
    assert policy(model.transformer.h[0].mlp, False, 33000)
    assert not policy(model.transformer.h, False, 99000)  # a ModuleList, as in torch's policy


def test_sharded_state_dict_type_asks_for_distributed_checkpoints(tmp_path) -> None:
    """``state_dict_type=SHARDED_STATE_DICT`` sets ModelParallelStrategy's save_distributed_checkpoint."""
    args = _args(tmp_path, fsdp=True, fsdp_config={"state_dict_type": "SHARDED_STATE_DICT"})
    assert to_lightning(args, env=TWO).strategy._save_distributed_checkpoint is True


def test_hybrid_shard_needs_version_1(tmp_path) -> None:
    """``fsdp="hybrid_shard"`` with FSDP2 is refused, as transformers refuses it."""
    with pytest.raises(ValueError, match="hybrid_shard.*version"):
        _args(tmp_path, fsdp="hybrid_shard")


def test_unknown_auto_wrap_policy_is_refused(tmp_path) -> None:
    """An ``auto_wrap_policy`` outside Accelerate's three is refused, naming the choices."""
    with pytest.raises(ValueError, match="SIZE_BASED_WRAP"):
        _args(tmp_path, fsdp=True, fsdp_config={"auto_wrap_policy": "EVERYTHING"})


def test_fsdp2_refuses_local_state_dict(tmp_path) -> None:
    """FSDP2 with ``state_dict_type=LOCAL_STATE_DICT`` is refused, as Accelerate refuses it."""
    args = _args(tmp_path, fsdp=True, fsdp_config={"state_dict_type": "LOCAL_STATE_DICT"})
    with pytest.raises(ValueError, match="state_dict_type.*FSDP2"):
        to_lightning(args)


def test_fsdp2_refuses_forward_prefetch(tmp_path) -> None:
    """FSDP2 with ``forward_prefetch`` is refused, as Accelerate refuses it."""
    args = _args(tmp_path, fsdp=True, fsdp_config={"forward_prefetch": True})
    with pytest.raises(ValueError, match="forward_prefetch"):
        to_lightning(args)


def test_xla_fsdp_is_not_supported(tmp_path) -> None:
    """``fsdp_config['xla']`` raises NotImplementedError naming the key."""
    args = _args(tmp_path, fsdp=True, fsdp_config={"xla": True})
    with pytest.raises(NotImplementedError, match="xla"):
        to_lightning(args)


def test_unknown_layer_class_is_refused() -> None:
    """A ``transformer_layer_cls_to_wrap`` the model lacks is refused, naming the class."""
    settings = FSDPSettings(
        2, True, False, "TRANSFORMER_BASED_WRAP", 0, ("NoSuchBlock",), "FULL_STATE_DICT", False, False
    )
    with pytest.raises(ValueError, match="NoSuchBlock"):
        wraps_module(settings, tiny_gpt2())


def test_default_wrap_uses_no_split_modules() -> None:
    """Without class names, the layers wrapped are the model's ``_no_split_modules`` (GPT2Block)."""
    settings = FSDPSettings(
        2, True, False, "TRANSFORMER_BASED_WRAP", 0, None, "FULL_STATE_DICT", False, False
    )
    model = tiny_gpt2()
    wrapped = [type(m).__name__ for m in model.modules() if wraps_module(settings, model)(m)]
    assert wrapped == ["GPT2Block", "GPT2Block"]


def test_size_based_wrap_uses_min_num_params() -> None:
    """``SIZE_BASED_WRAP`` wraps every module with at least ``min_num_params`` parameters."""
    settings = FSDPSettings(2, True, False, "SIZE_BASED_WRAP", 20000, None, "FULL_STATE_DICT", False, False)
    model = tiny_gpt2()
    predicate = wraps_module(settings, model)
    assert all(sum(p.numel() for p in m.parameters()) >= 20000 for m in model.modules() if predicate(m))
    assert predicate(model.transformer.h[0]) and not predicate(model.transformer.ln_f)


def test_size_based_wrap_follows_torchs_policy() -> None:
    """Bottom-up: a module is wrapped when its parameters outside wrapped descendants reach
    ``min_num_params``; containers and modules tied to outside parameters (GPT-2's ``transformer``, whose
    ``wte`` is ``lm_head``) are not; children come before parents."""
    from hf_lightning.adapters.fsdp import modules_to_wrap

    model = tiny_gpt2()
    small = FSDPSettings(2, True, False, "SIZE_BASED_WRAP", 20000, None, "FULL_STATE_DICT", False, False)
    assert [type(m).__name__ for m in modules_to_wrap(small, model)] == ["GPT2MLP", "GPT2MLP"]
    convs = FSDPSettings(2, True, False, "SIZE_BASED_WRAP", 10000, None, "FULL_STATE_DICT", False, False)
    assert [type(m).__name__ for m in modules_to_wrap(convs, model)] == [
        "Conv1D"
    ] * 6  # not the 4160-param c_proj

    class Outer(torch.nn.Module):  # its own 20000 parameters and a wrapped child
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(200, 100))
            self.inner = torch.nn.Linear(100, 100)
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(100, 100)])

    root = torch.nn.Sequential(Outer())
    chosen = modules_to_wrap(convs, root)
    assert [type(m).__name__ for m in chosen] == [
        "Linear",
        "Linear",
        "Outer",
    ]  # children first, no ModuleList


# --- real runs: 2 gloo processes ---------------------------------------------------------


FSDP2_MODES = ("fsdp", "fsdp_grad_op", "fsdp_ckpt", "fsdp_offload", "fsdp_size")
FSDP1_MODES = ("fsdp1", "fsdp1_grad_op", "fsdp1_ckpt", "fsdp1_size", "fsdp1_hybrid", "fsdp1_size_ckpt")


@pytest.fixture(scope="module")
def fsdp_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """DDP, FSDP2 and FSDP1 runs (full shard, shard_grad_op, activation checkpointing, offload, size-based
    wrapping): per mode, each rank's record."""
    from tests._ddp import run_ranks

    out = tmp_path_factory.mktemp("fsdp")
    modes = ("ddp", *FSDP2_MODES, *FSDP1_MODES, "ddp_twice", "fsdp1_twice")
    for mode in modes:
        run_ranks("tests/fsdp_worker.py", [str(out), mode], world=2)
    runs = {m: [torch.load(out / f"{m}_rank{r}.pt", weights_only=True) for r in range(2)] for m in modes}
    return {**runs, "folder": out}


@pytest.mark.slow
@pytest.mark.ddp
@pytest.mark.parametrize("mode", [*FSDP2_MODES, *FSDP1_MODES])
def test_fsdp_weights_equal_ddp(fsdp_runs, mode: str) -> None:
    """After 4 steps with GA 2, the gathered weights under FSDP2 and FSDP1 (full shard, shard_grad_op,
    activation checkpointing, CPU offload, size-based wrapping) equal DDP's within 1e-5."""
    ddp = fsdp_runs["ddp"][0]["state"]
    for record in fsdp_runs[mode]:
        for name, value in ddp.items():
            torch.testing.assert_close(record["state"][name], value, rtol=0, atol=1e-5, msg=name)


@pytest.mark.slow
@pytest.mark.ddp
@pytest.mark.parametrize("mode", ["fsdp", "fsdp1"])
def test_fsdp_logs_the_losses_ddp_logs(fsdp_runs, mode: str) -> None:
    """The losses and gradient norms logged under FSDP2 and FSDP1 equal those logged under DDP."""
    ddp = fsdp_runs["ddp"][0]
    assert fsdp_runs[mode][0]["losses"] == pytest.approx(ddp["losses"], abs=1e-6)
    assert fsdp_runs[mode][0]["grad_norms"] == pytest.approx(ddp["grad_norms"], abs=1e-5)


@pytest.mark.slow
@pytest.mark.ddp
@pytest.mark.parametrize("mode", ["fsdp_ckpt", "fsdp1_ckpt"])
def test_activation_checkpointing_wraps_the_layers(fsdp_runs, mode: str) -> None:
    """``activation_checkpointing`` wraps each transformer layer (2 GPT2Blocks) in a checkpoint wrapper."""
    assert [record["checkpointed_layers"] for record in fsdp_runs[mode]] == [2, 2]
    assert fsdp_runs["fsdp"][0]["checkpointed_layers"] == 0


@pytest.mark.slow
@pytest.mark.ddp
def test_size_based_checkpointing_picks_the_same_layers_on_every_rank(fsdp_runs) -> None:
    """With ``SIZE_BASED_WRAP`` the checkpointed layers are chosen from the whole model before FSDP1 shards it
    (chosen from each rank's shards they differed, and the ranks' all-gathers hung)."""
    counts = [record["checkpointed_layers"] for record in fsdp_runs["fsdp1_size_ckpt"]]
    assert counts[0] == counts[1] > 0


@pytest.mark.slow
@pytest.mark.ddp
def test_second_train_under_fsdp1_equals_ddp(fsdp_runs) -> None:
    """A second ``train()`` of the same Trainer under FSDP1 (its optimizer already holds shards) ends with the
    weights DDP's two ``train()`` calls reach."""
    ddp = fsdp_runs["ddp_twice"][0]["state"]
    for record in fsdp_runs["fsdp1_twice"]:
        for name, value in ddp.items():
            torch.testing.assert_close(record["state"][name], value, rtol=0, atol=1e-5, msg=name)


@pytest.mark.slow
@pytest.mark.ddp
@pytest.mark.parametrize("mode", ["fsdp", "fsdp1"])
def test_save_model_writes_full_weights_from_pretrained_loads(fsdp_runs, mode: str) -> None:
    """``save_model()`` after FSDP2 or FSDP1 training writes full weights that ``from_pretrained`` loads: DDP's."""
    from transformers import GPT2LMHeadModel

    loaded = GPT2LMHeadModel.from_pretrained(fsdp_runs["folder"] / f"{mode}_saved").state_dict()
    for name, value in fsdp_runs["ddp"][0]["state"].items():
        torch.testing.assert_close(loaded[name], value, rtol=0, atol=1e-5, msg=name)


@pytest.mark.slow
@pytest.mark.ddp
@pytest.mark.parametrize("mode", ["fsdp", "fsdp1", "fsdp1_grad_op", "fsdp1_hybrid"])
def test_each_rank_holds_half_the_parameters(fsdp_runs, mode: str) -> None:
    """Under FSDP2 (its DTensor shards) and FSDP1 (its flat shards) each rank holds half of the parameter
    elements DDP holds whole; ``hybrid_shard`` shards within the node (here both processes), replicating
    across nodes."""
    whole = fsdp_runs["ddp"][0]["local_numel"]
    assert [record["local_numel"] for record in fsdp_runs[mode]] == [whole // 2, whole // 2]


def test_lightning_checkpoints_of_an_fsdp1_hf_module_are_refused(tmp_path) -> None:
    """``trainer.save_checkpoint``/``ModelCheckpoint`` would take Lightning's FSDP state dict of a module it did not
    wrap: refused by name, pointing at the Trainer's checkpoints."""
    from hf_lightning.adapters.fsdp1_module import FSDP1Module

    args = _args(tmp_path, fsdp="full_shard", fsdp_config={"version": 1})
    strategy = to_lightning(args, env=TWO).strategy
    strategy._lightning_module = FSDP1Module(tiny_gpt2(), args)
    with pytest.raises(NotImplementedError, match="save_checkpoint"):
        strategy.lightning_module_state_dict()
