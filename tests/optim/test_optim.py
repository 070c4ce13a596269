"""hf_lightning.optim on its own: schedules, optimizer choice, parameter groups, Adafactor, GreedyLR."""

from __future__ import annotations

import enum
import io
import math
import sys
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from hf_lightning.optim import (
    SCHEDULER_NAMES,
    Adafactor,
    GreedyLR,
    create_optimizer,
    get_decay_parameter_names,
    get_learning_rates,
    get_optimizer_cls_and_kwargs,
    get_scheduler,
    lr_lambdas,
)


def make_args(**overrides):
    """A stand-in for TrainingArguments with its optimizer defaults."""
    defaults = {
        "optim": "adamw_torch",
        "optim_args": None,
        "learning_rate": 1e-3,
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "adam_epsilon": 1e-8,
        "weight_decay": 0.1,
        "optim_target_modules": None,
    }
    return SimpleNamespace(**{**defaults, **overrides})


def sgd(lr: float = 1.0) -> torch.optim.SGD:
    return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.layer_norm = nn.LayerNorm(4)
        self.bn = nn.BatchNorm1d(4)
        self.final_norm = nn.Linear(4, 4, bias=False)


# --- learning-rate factors -------------------------------------------------------------------------

W2T10 = {"num_warmup_steps": 2, "num_training_steps": 10}
FACTORS = [
    (lr_lambdas.linear_lambda, W2T10, [(0, 0.0), (1, 0.5), (2, 1.0), (6, 0.5), (10, 0.0), (12, 0.0)]),
    (lr_lambdas.cosine_lambda, {**W2T10, "num_cycles": 0.5}, [(1, 0.5), (2, 1.0), (6, 0.5), (10, 0.0)]),
    (lr_lambdas.cosine_lambda, {**W2T10, "num_cycles": 0.5, "min_lr_rate": 0.2}, [(6, 0.6), (10, 0.2)]),
    (
        lr_lambdas.cosine_with_hard_restarts_lambda,
        {**W2T10, "num_cycles": 2},
        [(2, 1.0), (4, 0.5), (6, 1.0), (10, 0.0)],
    ),
    (
        lr_lambdas.constant_with_warmup_lambda,
        {"num_warmup_steps": 4},
        [(0, 0.0), (2, 0.5), (4, 1.0), (99, 1.0)],
    ),
    (
        lr_lambdas.inverse_sqrt_lambda,
        {"num_warmup_steps": 4, "timescale": 4},
        [(2, 0.5), (4, 1.0), (16, 0.5)],
    ),
    (
        lr_lambdas.polynomial_decay_lambda,
        {**W2T10, "lr_end": 0.25, "power": 2.0, "lr_init": 1.0},
        [(2, 1.0), (6, 0.25 + 0.75 * 0.25), (10, 0.25), (11, 0.25)],
    ),
    (
        lr_lambdas.wsd_lambda,
        {
            "num_warmup_steps": 2,
            "num_stable_steps": 3,
            "num_decay_steps": 4,
            "warmup_type": "linear",
            "decay_type": "linear",
            "min_lr_ratio": 0.2,
            "num_cycles": 0.5,
        },
        [(0, 0.2), (1, 0.6), (2, 1.0), (4, 1.0), (5, 1.0), (7, 0.6), (9, 0.2), (20, 0.2)],
    ),
    (
        lr_lambdas.cosine_warmup_with_min_lr_lambda,
        {**W2T10, "num_cycles": 0.5, "min_lr_rate": 0.0},
        [(0, 0.5), (1, 1.0), (9, 0.0)],
    ),
]


@pytest.mark.parametrize(
    ("fn", "kwargs", "points"), FACTORS, ids=[f[0].__name__ + str(i) for i, f in enumerate(FACTORS)]
)
def test_schedule_factors_at_known_steps(fn, kwargs, points):
    """Each learning-rate factor takes the documented value at landmark steps."""
    for step, expected in points:
        assert fn(step, **kwargs) == pytest.approx(expected, abs=1e-12), step


def test_polynomial_with_warmup_equal_to_total_ends_at_lr_end():
    """Warmup as long as training leaves no decay phase: the factor jumps to lr_end instead of dividing by 0."""
    optimizer = sgd(1.0)
    scheduler = get_scheduler("polynomial", optimizer, 5, 5, {"lr_end": 0.1})
    for _ in range(6):
        optimizer.step()
        scheduler.step()
    assert scheduler.get_last_lr() == [pytest.approx(0.1)]


# --- get_scheduler -------------------------------------------------------------------------------


def test_unknown_scheduler_name_names_argument_and_choices():
    """An unknown lr_scheduler_type raises ValueError that quotes it and lists every choice."""
    with pytest.raises(ValueError, match=r"lr_scheduler_type='cosine_annealing'.*linear.*greedy"):
        get_scheduler("cosine_annealing", sgd(), 1, 10)


def test_scheduler_name_may_be_a_str_enum():
    """A str-Enum member (e.g. SchedulerType.LINEAR) selects the schedule by its value."""

    class Kind(str, enum.Enum):
        LINEAR = "linear"

    optimizer = sgd()
    scheduler = get_scheduler(Kind.LINEAR, optimizer, 0, 4)
    optimizer.step()
    scheduler.step()
    assert scheduler.get_last_lr() == [pytest.approx(0.75)]


@pytest.mark.parametrize(
    ("name", "kind"),
    [("reduce_lr_on_plateau", torch.optim.lr_scheduler.ReduceLROnPlateau), ("greedy", GreedyLR)],
)
def test_metric_driven_schedules_need_no_step_counts(name, kind):
    """reduce_lr_on_plateau and greedy are built without warmup or training steps."""
    assert isinstance(get_scheduler(name, sgd()), kind)


@pytest.mark.parametrize("name", ["constant", "constant_with_warmup"])
def test_constant_schedules_warn_about_ignored_kwargs(name):
    """constant schedules take no lr_scheduler_kwargs and say so instead of ignoring them silently."""
    with pytest.warns(UserWarning, match="num_cycles"):
        get_scheduler(name, sgd(), 2, 10, {"num_cycles": 2})


def test_wsd_without_num_decay_steps_names_it():
    """warmup_stable_decay without num_decay_steps raises TypeError naming the missing key."""
    with pytest.raises(TypeError, match="num_decay_steps"):
        get_scheduler("warmup_stable_decay", sgd(), 2, 10, {})


def test_wsd_with_training_and_stable_steps_warns():
    """Giving both totals to warmup_stable_decay warns that num_stable_steps wins."""
    with pytest.warns(UserWarning, match="num_stable_steps"):
        get_scheduler("warmup_stable_decay", sgd(), 2, 10, {"num_decay_steps": 2, "num_stable_steps": 3})


def test_unknown_scheduler_kwarg_is_named():
    """A misspelt lr_scheduler_kwargs key raises TypeError naming it and what the schedule takes."""
    with pytest.raises(TypeError, match=r"\['num_cycle'\].*num_cycles"):
        get_scheduler("cosine", sgd(), 2, 10, {"num_cycle": 2})


def _run(scheduler, optimizer, steps):
    lrs = []
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    return lrs


@pytest.mark.parametrize("name", [n for n in SCHEDULER_NAMES if n not in ("reduce_lr_on_plateau", "greedy")])
def test_four_steps_equal_two_steps_resume_two_steps(name):
    """Saving the scheduler after 2 steps (weights_only load) and resuming gives the 4-step learning rates."""
    kwargs = {
        "cosine_with_min_lr": {"min_lr": 0.01},
        "cosine_warmup_with_min_lr": {"min_lr": 0.01},
        "warmup_stable_decay": {"num_decay_steps": 3},
    }.get(name, {})
    straight_opt = sgd()
    straight = _run(get_scheduler(name, straight_opt, 1, 6, kwargs), straight_opt, 4)
    first_opt = sgd()
    first = get_scheduler(name, first_opt, 1, 6, kwargs)
    _run(first, first_opt, 2)
    buffer = io.BytesIO()
    torch.save({"scheduler": first.state_dict(), "optimizer": first_opt.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    second_opt = sgd()
    second_opt.load_state_dict(saved["optimizer"])
    second = get_scheduler(name, second_opt, 1, 6, kwargs)
    second.load_state_dict(saved["scheduler"])
    assert straight[2:] == pytest.approx(_run(second, second_opt, 2))


# --- GreedyLR ------------------------------------------------------------------------------------


def test_greedy_raises_lr_after_a_streak_of_improvements():
    """More than `patience` improving steps divide the learning rate by `factor`, capped at max_lr."""
    optimizer = sgd(0.1)
    scheduler = GreedyLR(optimizer, patience=1, factor=0.5, max_lr=0.3)
    for metric in (5.0, 4.0, 3.0, 2.0, 1.0, 0.5):
        scheduler.step(metric)
    assert get_learning_rates(optimizer) == [pytest.approx(0.3)]


def test_greedy_lowers_lr_on_plateau_down_to_min_lr():
    """More than `patience` steps without improvement multiply the learning rate by `factor`, floored at min_lr."""
    optimizer = sgd(0.1)
    scheduler = GreedyLR(optimizer, patience=1, factor=0.5, min_lr=0.03)
    for metric in (1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0):
        scheduler.step(metric)
    assert get_learning_rates(optimizer) == [pytest.approx(0.03)]


def test_greedy_resets_after_reset_start_reductions_at_the_floor():
    """After reset_start reductions that find the rate at min_lr, the initial rate comes back."""
    optimizer = sgd(0.1)
    scheduler = GreedyLR(optimizer, patience=0, factor=0.5, min_lr=0.06, max_lr=0.1, reset_start=2)
    rates = []
    for _ in range(3):
        scheduler.step(1.0)
        rates.append(optimizer.param_groups[0]["lr"])
    assert rates == pytest.approx([0.1, 0.06, 0.1])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"factor": 1.0}, "factor=1.0"),
        ({"mode": "up"}, "mode='up'"),
        ({"threshold_mode": "pct"}, "threshold_mode='pct'"),
        ({"min_lr": [0.1, 0.2]}, "min_lr"),
    ],
)
def test_greedy_rejects_bad_arguments(kwargs, match):
    """Bad GreedyLR arguments raise ValueError naming the argument."""
    with pytest.raises(ValueError, match=match):
        GreedyLR(sgd(), **kwargs)


def test_greedy_state_dict_round_trip_continues_identically():
    """A GreedyLR restored from state_dict (with smoothing) continues exactly like the original."""
    metrics = [3.0, 2.0, 2.5, 2.5, 2.4, 1.0, 0.9, 0.9, 0.9]
    original_opt = sgd(0.1)
    original = GreedyLR(original_opt, patience=1, factor=0.5, min_lr=1e-3, smooth=True, window_size=2)
    for metric in metrics[:4]:
        original.step(metric)
    restored_opt = sgd(0.5)
    restored = GreedyLR(restored_opt, patience=1, factor=0.5, min_lr=1e-3, smooth=True, window_size=2)
    restored.load_state_dict(original.state_dict())
    for metric in metrics[4:]:
        original.step(metric)
        restored.step(metric)
        assert restored.get_last_lr() == original.get_last_lr()


# --- optimizer choice ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("optim", "cls"),
    [
        ("adamw_torch", torch.optim.AdamW),
        ("adamw_torch_fused", torch.optim.AdamW),
        ("adafactor", None),  # transformers' Adafactor when transformers is imported, else ours
        ("sgd", torch.optim.SGD),
        ("adagrad", torch.optim.Adagrad),
        ("rmsprop", torch.optim.RMSprop),
    ],
)
def test_each_supported_optimizer_trains_a_step_on_cpu(optim, cls):
    """Every supported optim value builds its class and takes a step on CPU (fused AdamW included)."""
    model = nn.Linear(3, 2)
    optimizer = create_optimizer(model, make_args(optim=optim))
    if cls is None:
        cls = (
            sys.modules["transformers.optimization"].Adafactor if "transformers" in sys.modules else Adafactor
        )
    assert type(optimizer) is cls
    before = model.weight.detach().clone()
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    assert not torch.equal(before, model.weight)


def test_fused_flag_is_passed_for_adamw_torch_fused():
    """adamw_torch_fused passes fused=True; adamw_torch does not."""
    assert get_optimizer_cls_and_kwargs(make_args(optim="adamw_torch_fused"))[1]["fused"] is True
    assert "fused" not in get_optimizer_cls_and_kwargs(make_args(optim="adamw_torch"))[1]


def test_optim_may_be_a_str_enum():
    """A str-Enum member (e.g. OptimizerNames.SGD) selects the optimizer by its value."""

    class Names(str, enum.Enum):
        SGD = "sgd"

    assert get_optimizer_cls_and_kwargs(make_args(optim=Names.SGD))[0] is torch.optim.SGD


def test_legacy_adamw_hf_maps_to_torch_adamw_with_a_warning():
    """optim='adamw_hf' (documented, removed from transformers) builds torch AdamW and says so."""
    with pytest.warns(UserWarning, match="adamw_hf"):
        cls, kwargs = get_optimizer_cls_and_kwargs(make_args(optim="adamw_hf"))
    assert cls is torch.optim.AdamW
    assert kwargs == {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8}


@pytest.mark.parametrize(
    "optim", ["adamw_torch_xla", "adamw_torch_4bit", "lion_8bit", "galore_adamw", "lomo"]
)
def test_package_optimizer_without_its_package_names_the_install(optim, monkeypatch):
    """A package optim value whose package is missing raises ImportError naming the value and the install."""
    module = {"adamw_torch_xla": "torch_xla", "adamw_torch_4bit": "torchao", "lion_8bit": "bitsandbytes",
              "galore_adamw": "galore_torch", "lomo": "lomo_optim"}[optim]  # fmt: skip
    # not installed: neither the package nor a submodule an earlier test imported (bitsandbytes.optim)
    for name in [module] + [m for m in sys.modules if m.startswith(module + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=rf"optim='{optim}'.*install"):
        get_optimizer_cls_and_kwargs(
            make_args(optim=optim, optim_target_modules=["x"]), torch.nn.Linear(2, 2)
        )


def test_unknown_optimizer_name_is_a_value_error():
    """A name that no library defines raises ValueError naming it."""
    with pytest.raises(ValueError, match="optim='adamw_torhc'"):
        get_optimizer_cls_and_kwargs(make_args(optim="adamw_torhc"))


def test_sgd_reads_typed_optim_args():
    """optim_args values become floats and booleans for the keys SGD reads."""
    _, kwargs = get_optimizer_cls_and_kwargs(make_args(optim="sgd", optim_args="momentum=0.9,nesterov=yes"))
    assert kwargs == {"lr": 1e-3, "momentum": 0.9, "nesterov": True}


@pytest.mark.parametrize(("optim", "optim_args"), [("adamw_torch", "amsgrad=True"), ("sgd", "betas=0.1")])
def test_unread_optim_args_warn(optim, optim_args):
    """optim_args keys that the chosen optimizer does not read are named in a warning, not dropped silently."""
    with pytest.warns(UserWarning, match=optim_args.split("=")[0]):
        get_optimizer_cls_and_kwargs(make_args(optim=optim, optim_args=optim_args))


def test_optim_target_modules_warns_for_optimizers_that_ignore_it():
    """optim_target_modules (GaLore/APOLLO only) is named in a warning for other optimizers."""
    with pytest.warns(UserWarning, match="optim_target_modules"):
        get_optimizer_cls_and_kwargs(make_args(optim_target_modules=["attn"]))


# --- parameter groups ----------------------------------------------------------------------------


def test_decay_names_exclude_biases_and_norms_by_transformers_rule():
    """Biases, LayerNorm params and *_norm names get no decay; BatchNorm named 'bn' does, as in transformers."""
    names = get_decay_parameter_names(Block())
    assert names == ["proj.weight", "bn.weight"]


def test_create_optimizer_makes_decay_and_no_decay_groups_of_trainable_params():
    """Group 0 holds decayed trainable params with weight_decay, group 1 the rest with 0.0; frozen ones are left out."""
    model = Block()
    model.bn.weight.requires_grad_(False)
    optimizer = create_optimizer(model, make_args(weight_decay=0.25))
    decayed, plain = optimizer.param_groups
    assert decayed["weight_decay"] == 0.25 and plain["weight_decay"] == 0.0
    assert [p.shape for p in decayed["params"]] == [model.proj.weight.shape]
    plain_ids = {id(p) for p in plain["params"]}
    assert id(model.bn.weight) not in plain_ids and id(model.proj.bias) in plain_ids


def test_optimizer_cls_and_kwargs_overrides_optim_without_mutating_it():
    """optimizer_cls_and_kwargs picks the class and kwargs; the caller's dict is left as it was."""
    override_kwargs = {"lr": 0.5, "momentum": 0.9}
    optimizer = create_optimizer(Block(), make_args(optim="adafactor"), (torch.optim.SGD, override_kwargs))
    assert type(optimizer) is torch.optim.SGD
    assert optimizer.defaults["momentum"] == 0.9 and override_kwargs == {"lr": 0.5, "momentum": 0.9}


def test_params_in_override_kwargs_replace_the_groups():
    """A `params` entry in optimizer_cls_and_kwargs replaces the default decay groups."""
    model = Block()
    optimizer = create_optimizer(
        model, make_args(), (torch.optim.SGD, {"lr": 0.1, "params": [model.proj.weight]})
    )
    assert len(optimizer.param_groups) == 1 and optimizer.param_groups[0]["params"] == [model.proj.weight]


def test_optimizer_factory_is_called_with_the_model():
    """A first element that is not an Optimizer class is a factory: factory()(model, **kwargs)."""
    calls = []

    class Factory:
        def __call__(self, model, **kwargs):
            calls.append(kwargs)
            return torch.optim.SGD(model.parameters(), **kwargs)

    optimizer = create_optimizer(Block(), make_args(), (Factory, {"lr": 0.2}))
    assert calls == [{"lr": 0.2}] and optimizer.defaults["lr"] == 0.2


def test_get_learning_rates_lists_each_group():
    """get_learning_rates returns one rate per parameter group, and refuses a missing optimizer."""
    optimizer = create_optimizer(Block(), make_args(learning_rate=0.3))
    assert get_learning_rates(optimizer) == [0.3, 0.3]
    with pytest.raises(ValueError, match="optimizer"):
        get_learning_rates(None)


# --- Adafactor -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 1e-3}, "relative_step"),
        ({"relative_step": False, "lr": 1e-3, "warmup_init": True}, "warmup_init"),
    ],
)
def test_adafactor_rejects_conflicting_options(kwargs, match):
    """A manual lr with relative_step, or warmup_init without it, raises ValueError naming the option."""
    with pytest.raises(ValueError, match=match):
        Adafactor([nn.Parameter(torch.zeros(2))], **kwargs)


def test_adafactor_factors_the_second_moment_of_matrices_only():
    """Matrices keep row and column statistics; vectors keep a full second moment."""
    model = nn.Linear(3, 2)
    optimizer = Adafactor(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    weight_state, bias_state = optimizer.state[model.weight], optimizer.state[model.bias]
    assert weight_state["exp_avg_sq_row"].shape == (2,) and weight_state["exp_avg_sq_col"].shape == (3,)
    assert bias_state["exp_avg_sq"].shape == (2,) and bias_state["step"] == 1


def test_adafactor_keeps_half_precision_parameters_in_their_dtype():
    """fp16 parameters are updated through fp32 and stay fp16."""
    param = nn.Parameter(torch.ones(4, 4, dtype=torch.float16))
    optimizer = Adafactor([param], lr=0.1, relative_step=False)
    param.grad = torch.ones_like(param)
    optimizer.step()
    assert param.dtype == torch.float16 and float(param[0, 0].detach()) < 1.0


def test_adafactor_step_returns_the_closure_loss():
    """step(closure) evaluates the closure with gradients enabled and returns its loss."""
    param = nn.Parameter(torch.ones(3))
    optimizer = Adafactor([param])

    def closure():
        optimizer.zero_grad()
        loss = (param**2).sum()
        loss.backward()
        return loss

    assert float(optimizer.step(closure).detach()) == pytest.approx(3.0)
    total = float(param.detach().sum())
    assert math.isfinite(total) and total < 3.0


def test_adafactor_refuses_sparse_gradients():
    """Sparse gradients raise RuntimeError."""
    embedding = nn.Embedding(4, 2, sparse=True)
    optimizer = Adafactor(embedding.parameters())
    embedding(torch.tensor([1])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        optimizer.step()


def test_a_scheduler_stepped_with_a_metric_is_recognised_by_its_step():
    """steps_on_metric asks the scheduler (its ``step`` needs the metric), not its class name: transformers'
    own GreedyLR and a user's metric-driven scheduler count; a schedule (StepLR, LambdaLR) does not."""
    from transformers.optimization import GreedyLR as TransformersGreedyLR

    from hf_lightning.optim import steps_on_metric

    class OnMetric:
        def step(self, metrics, epoch=None):
            pass

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    assert steps_on_metric(TransformersGreedyLR(optimizer)) and steps_on_metric(OnMetric())
    assert not steps_on_metric(torch.optim.lr_scheduler.StepLR(optimizer, 2))
    assert not steps_on_metric(torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0))


def test_adafactor_is_ours_and_transformers_stays_unimported_without_it():
    """A process that never imported transformers gets hf_lightning's Adafactor, and optim="adafactor" does not
    import transformers for it."""
    import subprocess

    code = (
        "import sys, torch; from hf_lightning import TrainingArguments; "
        "from hf_lightning.optim import create_optimizer; from hf_lightning.optim.adafactor import Adafactor; "
        "o = create_optimizer(torch.nn.Linear(2, 2), TrainingArguments('out', optim='adafactor', report_to='none')); "
        "print(type(o) is Adafactor, 'transformers' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "False"]
