"""Specs of the ``optim`` names that need a package: ImportError naming the extra, low-rank groups,
layer-wise stepping, LOMO's fused backward, schedule-free modes and Liger's CPU error."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from torch import nn

from hf_lightning import Trainer, TrainingArguments
from hf_lightning.optim import (
    PACKAGE_OPTIMIZERS,
    SUPPORTED_OPTIMIZERS,
    LayerWiseDummyOptimizer,
    LayerWiseDummyScheduler,
    create_optimizer,
    get_optimizer_cls_and_kwargs,
    get_scheduler,
)
from tests.tiny import RegressionModel, causal_lm_data, regression_data, tiny_llama

# optim name -> (the module it imports, the install hint its ImportError must name)
PACKAGE_OF = {
    **{name: ("bitsandbytes", "hf-lightning[bitsandbytes]") for name in (
        "adamw_bnb_8bit", "adamw_8bit", "paged_adamw_32bit", "paged_adamw_8bit", "ademamix", "ademamix_8bit",
        "paged_ademamix_32bit", "paged_ademamix_8bit", "lion_32bit", "lion_8bit", "paged_lion_32bit",
        "paged_lion_8bit", "rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit")},
    **{name: ("galore_torch", "hf-lightning[galore]") for name in (
        "galore_adamw", "galore_adamw_8bit", "galore_adafactor", "galore_adamw_layerwise",
        "galore_adamw_8bit_layerwise", "galore_adafactor_layerwise")},
    "apollo_adamw": ("apollo_torch", "hf-lightning[apollo]"),
    "apollo_adamw_layerwise": ("apollo_torch", "hf-lightning[apollo]"),
    "schedule_free_radam": ("schedulefree", "hf-lightning[schedulefree]"),
    "schedule_free_adamw": ("schedulefree", "hf-lightning[schedulefree]"),
    "schedule_free_sgd": ("schedulefree", "hf-lightning[schedulefree]"),
    "adamw_torch_4bit": ("torchao", "hf-lightning[torchao]"),
    "adamw_torch_8bit": ("torchao", "hf-lightning[torchao]"),
    "lomo": ("lomo_optim", "hf-lightning[lomo]"),
    "adalomo": ("lomo_optim", "hf-lightning[lomo]"),
    "grokadamw": ("grokadamw", "hf-lightning[grokadamw]"),
    "stable_adamw": ("optimi", "hf-lightning[optimi]"),
    "adamw_anyprecision": ("torchdistx", "torchdistx"),
    "adamw_torch_xla": ("torch_xla", "torch_xla"),
    "adamw_torch_npu_fused": ("torch_npu", "torch_npu"),
}  # fmt: skip


class TwoLinear(nn.Module):
    """Embedding -> Linear -> LayerNorm -> Linear, with an MSE loss."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(10, 8)
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 1)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None):
        out = self.head(self.norm(self.proj(self.embed(input_ids)))).squeeze(-1).mean(-1)
        return (nn.functional.mse_loss(out, labels), out) if labels is not None else (out,)


def make_args(tmp_path, **kwargs) -> TrainingArguments:
    defaults = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", disable_tqdm=True)
    return TrainingArguments(**{**defaults, **kwargs})


def test_every_package_name_is_covered():
    """The table above names every OptimizerNames value that needs a package, and no torch one."""
    assert set(PACKAGE_OF) == set(PACKAGE_OPTIMIZERS)
    assert not set(PACKAGE_OPTIMIZERS) & set(SUPPORTED_OPTIMIZERS)


@pytest.mark.parametrize("name", sorted(PACKAGE_OF))
def test_missing_package_raises_import_error_naming_the_extra(name, monkeypatch, tmp_path):
    """Without its package, every name raises ImportError naming the name and the install line."""
    module, hint = PACKAGE_OF[name]
    # not installed: neither the package nor a submodule an earlier test imported (bitsandbytes.optim)
    for loaded in [module] + [m for m in sys.modules if m.startswith(module + ".")]:
        monkeypatch.setitem(sys.modules, loaded, None)
    args = make_args(tmp_path, optim=name, optim_target_modules=["proj"])
    with pytest.raises(
        ImportError, match=rf"optim='{name}'.*{hint.replace('[', '.').replace(']', '.')}"
    ) as info:
        get_optimizer_cls_and_kwargs(args, TwoLinear())
    # also the ValueError transformers raises for some names (its tests catch that type)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("name", sorted(PACKAGE_OF))
def test_no_name_raises_not_implemented(name, monkeypatch, tmp_path):
    """No optim name raises NotImplementedError, installed or not."""
    monkeypatch.setitem(sys.modules, PACKAGE_OF[name][0], None)
    try:
        get_optimizer_cls_and_kwargs(
            make_args(tmp_path, optim=name, optim_target_modules=["proj"]), TwoLinear()
        )
    except NotImplementedError as error:  # pragma: no cover - the failure this test guards against
        pytest.fail(f"{name}: {error}")
    except ImportError:
        pass


def test_too_old_schedulefree_for_radam_names_the_version(monkeypatch, tmp_path):
    """schedule_free_radam with schedulefree < 1.4.0 raises ImportError naming the version."""
    fake = types.ModuleType("schedulefree")
    monkeypatch.setitem(sys.modules, "schedulefree", fake)
    monkeypatch.setattr("hf_lightning.optim.packages.package_version", lambda module: "1.2.0")
    with pytest.raises(ImportError, match=r"schedulefree>=1\.4\.0"):
        get_optimizer_cls_and_kwargs(make_args(tmp_path, optim="schedule_free_radam"))


def test_liger_without_package_raises_import_error(monkeypatch, tmp_path):
    """use_liger_kernel=True without liger-kernel raises ImportError naming the extra at train()."""
    monkeypatch.setitem(sys.modules, "liger_kernel", None)
    trainer = Trainer(
        RegressionModel(), make_args(tmp_path, use_liger_kernel=True), train_dataset=regression_data(8)
    )
    with pytest.raises(ImportError, match=r"use_liger_kernel=True.*hf-lightning\[liger\]"):
        trainer.train()


def test_liger_on_cpu_raises_before_training(monkeypatch, tmp_path):
    """use_liger_kernel=True without a CUDA GPU raises RuntimeError naming the argument before any step."""
    monkeypatch.setitem(sys.modules, "liger_kernel", types.ModuleType("liger_kernel"))
    monkeypatch.setattr("hf_lightning.optim.packages.package_version", lambda module: "0.8.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    model = RegressionModel()
    trainer = Trainer(model, make_args(tmp_path, use_liger_kernel=True), train_dataset=regression_data(8))
    with pytest.raises(RuntimeError, match=r"use_liger_kernel=True.*CUDA GPU"):
        trainer.train()
    assert trainer.state.global_step == 0 and model.a.item() == 0.0


# --- GaLore / APOLLO: groups from optim_target_modules ------------------------------------------


def _group_names(model: nn.Module, groups: list[dict]) -> list[list[str]]:
    names = {id(p): n for n, p in model.named_parameters()}
    return [[names[id(p)] for p in group["params"]] for group in groups]


@pytest.mark.parametrize(
    ("targets", "low_rank"),
    [
        (["proj"], ["proj.weight"]),
        (r".*head", ["head.weight"]),
        ("all-linear", ["proj.weight", "head.weight"]),
        ("all_linear", ["proj.weight", "head.weight"]),
    ],
)
def test_galore_groups_follow_optim_target_modules(targets, low_rank, tmp_path):
    """optim_target_modules (names, a regex, 'all-linear') picks the Linear weights of the low-rank group."""
    pytest.importorskip("galore_torch")
    model = TwoLinear()
    args = make_args(tmp_path, optim="galore_adamw", optim_target_modules=targets, optim_args="rank=4")
    optimizer = create_optimizer(model, args)
    plain, target = _group_names(model, optimizer.param_groups)
    assert target == low_rank
    assert set(plain) == {n for n, _ in model.named_parameters()} - set(low_rank)
    assert optimizer.param_groups[1]["rank"] == 4


def test_galore_without_target_modules_is_a_value_error(tmp_path):
    """GaLore without optim_target_modules raises ValueError naming the argument."""
    pytest.importorskip("galore_torch")
    with pytest.raises(ValueError, match="optim_target_modules"):
        get_optimizer_cls_and_kwargs(make_args(tmp_path, optim="galore_adamw"), TwoLinear())


def test_galore_target_modules_matching_nothing_is_a_value_error(tmp_path):
    """optim_target_modules that match no nn.Linear raise ValueError naming the value."""
    pytest.importorskip("galore_torch")
    args = make_args(tmp_path, optim="galore_adamw", optim_target_modules=["nothing_here"])
    with pytest.raises(ValueError, match="nothing_here"):
        get_optimizer_cls_and_kwargs(args, TwoLinear())


def test_layerwise_optimizer_steps_during_backward(tmp_path):
    """galore_adamw_layerwise updates each weight in backward; the Trainer's optimizer step does nothing."""
    pytest.importorskip("galore_torch")
    model = TwoLinear()
    args = make_args(
        tmp_path, optim="galore_adamw_layerwise", optim_target_modules=["proj"], optim_args="rank=4"
    )
    optimizer = create_optimizer(model, args)
    assert isinstance(optimizer, LayerWiseDummyOptimizer)
    before = model.head.weight.detach().clone()
    loss, _ = model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([1.0]))
    loss.backward()
    assert not torch.equal(model.head.weight, before)
    assert model.head.weight.grad is None  # stepped and zeroed in the hook


def test_layerwise_scheduler_steps_each_parameter_in_backward(tmp_path):
    """get_scheduler over a layer-wise optimizer steps one scheduler per parameter during backward."""
    pytest.importorskip("galore_torch")
    model = TwoLinear()
    args = make_args(
        tmp_path, optim="galore_adamw_layerwise", optim_target_modules=["proj"], learning_rate=1e-2
    )
    optimizer = create_optimizer(model, args)
    scheduler = get_scheduler("linear", optimizer, num_warmup_steps=2, num_training_steps=10)
    assert isinstance(scheduler, LayerWiseDummyScheduler)
    assert set(scheduler.inner_rates()) == {0.0}
    loss, _ = model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([1.0]))
    loss.backward()
    assert scheduler.inner_rates() == pytest.approx([5e-3] * 7)  # one per parameter


def test_layerwise_with_gradient_accumulation_is_a_value_error(tmp_path):
    """A layer-wise optimizer with gradient_accumulation_steps > 1 raises ValueError naming both."""
    pytest.importorskip("galore_torch")
    args = make_args(
        tmp_path, optim="galore_adamw_layerwise", optim_target_modules=["proj"], gradient_accumulation_steps=2
    )
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        get_optimizer_cls_and_kwargs(args, TwoLinear())


# --- training with the Trainer ----------------------------------------------------------------


def _ids_data(n: int = 16) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        {"input_ids": torch.randint(0, 10, (4,), generator=g), "labels": torch.randn((), generator=g)}
        for _ in range(n)
    ]


def test_layerwise_training_changes_weights_through_the_trainer(tmp_path):
    """Trainer.train with galore_adamw_layerwise trains (the hooks step) and logs the inner learning rate."""
    pytest.importorskip("galore_torch")
    model = TwoLinear()
    before = model.proj.weight.detach().clone()
    args = make_args(
        tmp_path,
        optim="galore_adamw_layerwise",
        optim_target_modules=["proj"],
        max_steps=3,
        logging_steps=1,
        learning_rate=1e-2,
        optim_args="rank=4",
    )
    trainer = Trainer(model, args, train_dataset=_ids_data())
    trainer.train()
    assert not torch.equal(model.proj.weight, before)
    assert [h["learning_rate"] for h in trainer.state.log_history if "loss" in h] == pytest.approx(
        [1e-2, 2e-2 / 3, 1e-2 / 3]
    )


def test_lomo_updates_weights_in_its_fused_backward(tmp_path):
    """optim='lomo' trains through the optimizer's fused backward (the learning rate of the schedule)."""
    pytest.importorskip("lomo_optim")
    model = TwoLinear()
    before = model.head.weight.detach().clone()
    args = make_args(tmp_path, optim="lomo", max_steps=2, learning_rate=1e-1, max_grad_norm=0.0)
    trainer = Trainer(model, args, train_dataset=_ids_data())
    trainer.train()
    assert not torch.equal(model.head.weight, before)


def test_schedule_free_evaluates_and_saves_in_eval_mode(tmp_path):
    """A schedule-free optimizer is in eval mode for evaluation and the save after it, train mode for steps."""
    pytest.importorskip("schedulefree")
    from hf_lightning.callbacks import TrainerCallback

    seen: list[tuple[str, bool]] = []

    class Modes(TrainerCallback):
        def on_step_end(self, args, state, control, optimizer=None, **kwargs):
            seen.append(("step", optimizer.param_groups[0]["train_mode"]))

        def on_evaluate(self, args, state, control, **kwargs):
            seen.append(("evaluate", kwargs["optimizer"].param_groups[0]["train_mode"]))

        def on_save(self, args, state, control, **kwargs):
            seen.append(("save", kwargs["optimizer"].param_groups[0]["train_mode"]))

    args = make_args(
        tmp_path,
        optim="schedule_free_adamw",
        max_steps=2,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="steps",
        save_steps=1,
    )
    trainer = Trainer(
        TwoLinear(), args, train_dataset=_ids_data(), eval_dataset=_ids_data(4), callbacks=[Modes()]
    )
    trainer.train()
    assert seen == [("step", True), ("evaluate", False), ("save", False)] * 2


def test_galore_adafactor_layerwise_builds(tmp_path):
    """galore_adafactor_layerwise builds per-parameter Adafactors without relative steps (transformers raises)."""
    pytest.importorskip("galore_torch")
    args = make_args(tmp_path, optim="galore_adafactor_layerwise", optim_target_modules=["proj"])
    optimizer = create_optimizer(TwoLinear(), args)
    inner = list(optimizer.optimizer_dict.values())
    assert all(not o.defaults["relative_step"] and not o.defaults["scale_parameter"] for o in inner)


def test_resuming_galore_state_is_refused_with_a_named_file(tmp_path):
    """GaLore's optimizer.pt holds projector objects: resuming it raises CheckpointError naming the file."""
    pytest.importorskip("galore_torch")
    from hf_lightning.checkpoint.io import CheckpointError

    args = make_args(
        tmp_path, optim="galore_adamw", optim_target_modules=["proj"], optim_args="rank=4,update_proj_gap=1",
        max_steps=2, save_strategy="steps", save_steps=1,
    )  # fmt: skip
    Trainer(TwoLinear(), args, train_dataset=_ids_data()).train()
    resumed = Trainer(TwoLinear(), args, train_dataset=_ids_data())
    with pytest.raises(CheckpointError, match="optimizer.pt"):
        resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))


def test_lomo_trains_under_a_plain_lightning_fit(tmp_path):
    """HFModule alone (a plain lightning.Trainer) trains with LOMO through its fused backward."""
    pytest.importorskip("lomo_optim")
    import lightning as L

    from hf_lightning.adapters import AccumulationWindows, HFModule

    model = TwoLinear()
    before = model.head.weight.detach().clone()
    args = make_args(tmp_path, optim="lomo", learning_rate=1e-1, max_grad_norm=0.0)
    loader = torch.utils.data.DataLoader(_ids_data(8), batch_size=4)
    trainer = L.Trainer(
        max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, accelerator="cpu",
    )  # fmt: skip
    trainer.fit(HFModule(model, args), AccumulationWindows(loader, 1))
    assert not torch.equal(model.head.weight, before)


def test_stable_adamw_trains_on_cpu_when_triton_is_installed(tmp_path, monkeypatch) -> None:
    """With Triton installed and no GPU, optimi would run Triton kernels on CPU tensors and fail: the
    optimizer is built with ``triton=False`` and steps on the CPU (docs/divergences.md)."""
    optimi_utils = pytest.importorskip("optimi.utils")
    monkeypatch.setattr(optimi_utils, "HAS_TRITON", True)  # as with a CUDA build of torch on a CPU machine
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    model = tiny_llama()
    args = TrainingArguments(str(tmp_path), optim="stable_adamw", report_to="none", use_cpu=True)
    optimizer = Trainer(model=model, args=args).create_optimizer()
    assert all(group["triton"] is False for group in optimizer.param_groups)
    batch = {key: value.unsqueeze(0) for key, value in causal_lm_data(n=1, vocab=128)[0].items()}
    model(**batch).loss.backward()
    before = next(model.parameters()).detach().clone()
    optimizer.step()
    assert not torch.equal(next(model.parameters()), before)


def test_bitsandbytes_optimizers_need_the_optim_submodule(monkeypatch, tmp_path):
    """With ``bitsandbytes`` imported but ``bitsandbytes.optim`` unimportable (transformers' own test pretends
    so), the 8-bit names raise ImportError naming the extra, as transformers' ``from bitsandbytes.optim
    import ...`` does."""
    pytest.importorskip("bitsandbytes.optim")  # imported: the package's ``optim`` attribute is set
    monkeypatch.setitem(sys.modules, "bitsandbytes.optim", None)
    with pytest.raises(ImportError, match=r"optim='adamw_bnb_8bit'.*hf-lightning\[bitsandbytes\]"):
        get_optimizer_cls_and_kwargs(make_args(tmp_path, optim="adamw_bnb_8bit"))
