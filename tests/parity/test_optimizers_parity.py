"""Parity: optimizer choice, kwargs, parameter groups and Adafactor updates equal transformers.Trainer's."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")
from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainingArguments,
)
from transformers.optimization import Adafactor as HFAdafactor  # noqa: E402
from transformers.optimization import AdafactorSchedule as HFAdafactorSchedule  # noqa: E402
from transformers.trainer_optimizer import _parse_optim_args  # noqa: E402
from transformers.training_args import OptimizerNames  # noqa: E402

from hf_lightning.optim import (  # noqa: E402
    PACKAGE_OPTIMIZERS,
    SUPPORTED_OPTIMIZERS,
    Adafactor,
    AdafactorSchedule,
    create_optimizer,
    get_decay_parameter_names,
    get_optimizer_cls_and_kwargs,
    parse_optim_args,
)


def tiny_gpt2() -> nn.Module:
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256))


def tiny_llama() -> nn.Module:
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=128,
    )
    return LlamaForCausalLM(config)


class CustomRMSNorm(nn.Module):
    """A normalisation class registered under a name without "norm" in it."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))


class OddNames(nn.Module):
    """Edge cases of the decay rule: non-LayerNorm norms, tied weights, a LayerNorm subclass, root params."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.bn = nn.BatchNorm1d(8)
        self.group = nn.GroupNorm(2, 8)
        self.scale = CustomRMSNorm(8)
        self.ln = nn.LayerNorm(8)
        self.attn_norm = nn.Linear(8, 8)
        self.normalizer = nn.Linear(8, 8, bias=False)
        self.head = nn.Linear(8, 10)
        self.head.weight = self.embed.weight
        self.temperature = nn.Parameter(torch.ones(1))


def hf_trainer(model: nn.Module, tmp_path, **args) -> Trainer:
    training_args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **args)
    return Trainer(model=model, args=training_args)


@pytest.mark.parametrize(
    "build", [tiny_gpt2, tiny_llama, OddNames], ids=["gpt2", "llama-rmsnorm", "odd-names"]
)
def test_decay_parameter_names_match_trainer(build, tmp_path):
    """get_decay_parameter_names lists the same names, in the same order, as Trainer's method."""
    model = build()
    assert get_decay_parameter_names(model) == hf_trainer(model, tmp_path).get_decay_parameter_names(model)


HF_NAMES = [name for name in SUPPORTED_OPTIMIZERS if name != "adamw_hf"]
OPTIM_ARGS = {
    "sgd": "momentum=0.9, nesterov=True, dampening=0",
    "adagrad": "lr_decay=0.01,eps=1e-9,weight_decay=0.2",
    "rmsprop": "momentum=0.5,alpha=0.9,centered=true",
}
HYPER = {
    "learning_rate": 3e-4,
    "adam_beta1": 0.8,
    "adam_beta2": 0.95,
    "adam_epsilon": 1e-6,
    "weight_decay": 0.01,
}


def _cases():
    for name in HF_NAMES:
        yield name, None
        if name in OPTIM_ARGS:
            yield name, OPTIM_ARGS[name]


CASES = list(_cases())


@pytest.mark.parametrize(("name", "optim_args"), CASES, ids=[f"{n}-{bool(a)}" for n, a in CASES])
def test_optimizer_class_and_kwargs_match_trainer(name, optim_args, tmp_path):
    """Class and kwargs (lr, betas, eps, fused, optim_args values) equal Trainer.get_optimizer_cls_and_kwargs."""
    args = TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to="none", optim=name, optim_args=optim_args, **HYPER
    )
    ours_cls, ours_kwargs = get_optimizer_cls_and_kwargs(args)
    theirs_cls, theirs_kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    assert ours_kwargs == theirs_kwargs
    assert ours_cls is theirs_cls  # transformers' own Adafactor once transformers is imported


@pytest.mark.parametrize("name", HF_NAMES)
def test_plain_string_optim_equals_enum_optim(name, tmp_path):
    """args.optim as a plain str gives what the OptimizerNames member gives."""
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", optim=name, **HYPER)
    plain = SimpleNamespace(**{**HYPER, "optim": name, "optim_args": None, "optim_target_modules": None})
    assert get_optimizer_cls_and_kwargs(plain) == get_optimizer_cls_and_kwargs(args)


@pytest.mark.parametrize(
    "text", [None, "", "a=1", "a=1,b=2", " momentum = 0.9 , nesterov=True ", "eps=1e-9,alpha=x", "a=1,a=2"]
)
def test_optim_args_parse_like_transformers(text):
    """optim_args strings parse to the same dict."""
    assert parse_optim_args(text) == _parse_optim_args(text)


@pytest.mark.parametrize("text", ["a", "a=1,", "a=1=2", "a=1;b=2"])
def test_malformed_optim_args_raise_value_error_in_both(text):
    """Malformed optim_args raise ValueError in both libraries."""
    with pytest.raises(ValueError):
        _parse_optim_args(text)
    with pytest.raises(ValueError, match="optim_args"):
        parse_optim_args(text)


def test_package_list_is_every_other_optimizer_name():
    """SUPPORTED + PACKAGE_OPTIMIZERS cover transformers' OptimizerNames exactly (plus the legacy adamw_hf)."""
    assert set(HF_NAMES) | set(PACKAGE_OPTIMIZERS) == {n.value for n in OptimizerNames}
    assert not set(HF_NAMES) & set(PACKAGE_OPTIMIZERS)


@pytest.mark.parametrize("member", [n for n in OptimizerNames if n.value in PACKAGE_OPTIMIZERS])
def test_package_optimizer_names_never_raise_not_implemented(member):
    """Every OptimizerNames value that needs a package builds or raises a named error, never NotImplementedError."""
    args = SimpleNamespace(
        **{**HYPER, "optim": member, "optim_args": None, "optim_target_modules": "all-linear"},
        warmup_steps=0,
        gradient_accumulation_steps=1,
    )
    try:
        get_optimizer_cls_and_kwargs(args, tiny_llama())
    except (
        ImportError
    ) as error:  # a package (or device build) this machine lacks: the error says how to get it
        assert member.value in str(error) and "install" in str(error)


def _group_summary(model: nn.Module, optimizer: torch.optim.Optimizer) -> list[dict]:
    names = {id(p): n for n, p in model.named_parameters()}
    return [
        {
            **{k: v for k, v in group.items() if k != "params"},
            "params": [names[id(p)] for p in group["params"]],
        }
        for group in optimizer.param_groups
    ]


@pytest.mark.parametrize("name", ["adamw_torch", "adamw_torch_fused", "sgd", "adafactor"])
def test_create_optimizer_groups_match_trainer(name, tmp_path):
    """Two groups with the same parameters, weight decay and hyperparameters as Trainer.create_optimizer."""
    model = tiny_gpt2()
    model.transformer.h[0].attn.c_attn.weight.requires_grad_(False)
    model.transformer.ln_f.bias.requires_grad_(False)
    trainer = hf_trainer(model, tmp_path, optim=name, **HYPER)
    theirs = trainer.create_optimizer()
    ours = create_optimizer(model, trainer.args)
    assert _group_summary(model, ours) == _group_summary(model, theirs)


def test_optimizer_cls_and_kwargs_override_matches_trainer(tmp_path):
    """optimizer_cls_and_kwargs replaces optim/optim_args, keeping the two decay groups, as in Trainer."""
    model = tiny_gpt2()
    override = (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9})
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **HYPER)
    theirs = Trainer(model=model, args=args, optimizer_cls_and_kwargs=override).create_optimizer()
    ours = create_optimizer(model, args, override)
    assert type(ours) is type(theirs)
    assert _group_summary(model, ours) == _group_summary(model, theirs)


def _overriding(base: type) -> type:
    """A subclass of ``base`` choosing its own decay names and optimizer, as sentence-transformers' Trainer does
    (an instance-method ``get_optimizer_cls_and_kwargs`` adding a loss module's weights)."""

    class Overriding(base):
        def get_decay_parameter_names(self, model):
            return [name for name in super().get_decay_parameter_names(model) if ".h.0." not in name]

        def get_optimizer_cls_and_kwargs(self, args, model=None):
            return torch.optim.SGD, {"lr": 0.05, "momentum": 0.5}

    return Overriding


def test_create_optimizer_uses_a_subclass_overrides_as_transformers(tmp_path):
    """``create_optimizer`` asks the Trainer's ``get_decay_parameter_names`` and ``get_optimizer_cls_and_kwargs``:
    a subclass's overrides choose the groups and the class, in ``train()`` too."""
    from hf_lightning import Trainer as OurTrainer
    from hf_lightning import TrainingArguments as OurArguments

    model = tiny_gpt2()
    theirs = _overriding(Trainer)(
        model=model, args=TrainingArguments(str(tmp_path / "t"), use_cpu=True, report_to="none", **HYPER)
    ).create_optimizer()
    ours_trainer = _overriding(OurTrainer)(
        model=model, args=OurArguments(str(tmp_path / "o"), use_cpu=True, report_to="none", **HYPER)
    )
    ours = ours_trainer.create_optimizer()
    assert type(ours) is type(theirs) is torch.optim.SGD
    assert _group_summary(model, ours) == _group_summary(model, theirs)
    assert "transformer.h.0.attn.c_attn.weight" in _group_summary(model, ours)[1]["params"]


def _train_five_steps(model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
    ids = torch.arange(24).reshape(2, 12) % 256
    model.eval()  # no dropout: both models see the same forward pass
    for _ in range(5):
        optimizer.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
    return model


def test_trainer_adafactor_updates_match_over_five_steps(tmp_path, monkeypatch):
    """optim="adafactor" on a tiny GPT-2 gives the same weights as Trainer's Adafactor after 5 steps, with our
    Adafactor (the class used where transformers is not imported)."""
    from hf_lightning.optim import optimizers

    ours_model, theirs_model = tiny_gpt2(), tiny_gpt2()
    args = TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to="none", optim="adafactor", **HYPER
    )
    theirs = Trainer(model=theirs_model, args=args).create_optimizer()
    monkeypatch.setattr(optimizers, "_adafactor_class", lambda: Adafactor)
    ours = create_optimizer(ours_model, args)
    assert isinstance(ours, Adafactor) and isinstance(theirs, HFAdafactor)
    _train_five_steps(ours_model, ours)
    _train_five_steps(theirs_model, theirs)
    for (name, a), b in zip(ours_model.named_parameters(), theirs_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=name)


ADAFACTOR_SETTINGS = [
    {},
    {"warmup_init": True},
    {"beta1": 0.9, "weight_decay": 0.1},
    {"lr": 1e-2, "relative_step": False, "scale_parameter": True, "clip_threshold": 0.5, "decay_rate": -0.5},
    {"lr": 1e-2, "relative_step": False, "scale_parameter": False, "eps": (1e-20, 1e-2), "beta1": 0.5},
]


class ThreeShapes(nn.Module):
    """Parameters of 1, 2 and 3 dimensions, to hit both factored and unfactored paths."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.vector = nn.Parameter(torch.randn(6))
        self.matrix = nn.Parameter(torch.randn(6, 4))
        self.cube = nn.Parameter(torch.randn(3, 6, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = x @ self.matrix.T + self.vector
        return (hidden.unsqueeze(0) @ self.cube).tanh().pow(2).sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("settings", ADAFACTOR_SETTINGS, ids=lambda s: ",".join(s) or "defaults")
def test_adafactor_matches_transformers_adafactor(settings, dtype):
    """Our Adafactor and transformers' give the same parameters over 5 steps for each setting and dtype."""
    models = [ThreeShapes().to(dtype) for _ in range(2)]
    optimizers = [
        Adafactor(models[0].parameters(), **settings),
        HFAdafactor(models[1].parameters(), **settings),
    ]
    x = torch.linspace(-1, 1, 24).reshape(6, 4).to(dtype)
    for step in range(5):
        for model, optimizer in zip(models, optimizers):
            optimizer.zero_grad()
            model(x * (step + 1)).backward()
            optimizer.step()
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_adafactor_schedule_reports_the_same_step_sizes():
    """AdafactorSchedule reports the step size transformers' reports, before and after stepping."""
    models = [ThreeShapes() for _ in range(2)]
    optimizers = [Adafactor(models[0].parameters()), HFAdafactor(models[1].parameters())]
    schedules = [AdafactorSchedule(optimizers[0], 1e-3), HFAdafactorSchedule(optimizers[1], 1e-3)]
    reports = [[], []]
    for i in range(2):
        reports[i].append([float(lr) for lr in schedules[i].get_lr()])
        for _ in range(3):
            optimizers[i].zero_grad()
            models[i](torch.ones(6, 4)).backward()
            optimizers[i].step()
            schedules[i].step()
            reports[i].append([float(lr) for lr in schedules[i].get_lr()])
    torch.testing.assert_close(reports[0], reports[1], rtol=1e-6, atol=0)


def test_adafactor_state_dict_loads_into_transformers_adafactor():
    """Adafactor state saved by ours resumes in transformers' with identical next updates."""
    ours_model = ThreeShapes()
    ours = Adafactor(ours_model.parameters(), beta1=0.9)
    for _ in range(2):
        ours.zero_grad()
        ours_model(torch.ones(6, 4)).backward()
        ours.step()
    theirs_model = copy.deepcopy(ours_model)
    theirs = HFAdafactor(theirs_model.parameters(), beta1=0.9)
    theirs.load_state_dict(copy.deepcopy(ours.state_dict()))
    for model, optimizer in ((ours_model, ours), (theirs_model, theirs)):
        optimizer.zero_grad()
        model(torch.ones(6, 4)).backward()
        optimizer.step()
    for a, b in zip(ours_model.parameters(), theirs_model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
