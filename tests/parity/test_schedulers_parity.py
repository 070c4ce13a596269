"""Parity: every ``lr_scheduler_type`` gives transformers' learning rate after every step."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers.optimization import get_scheduler as hf_get_scheduler  # noqa: E402
from transformers.trainer_utils import SchedulerType  # noqa: E402

import hf_lightning.optim  # noqa: E402
from hf_lightning.optim import SCHEDULER_NAMES, get_scheduler  # noqa: E402

N = 20
LR = 1e-3

# (lr_scheduler_type, lr_scheduler_kwargs); every type appears, most with more than one setting
CASES = [
    ("linear", {}),
    ("cosine", {}),
    ("cosine", {"num_cycles": 1.5}),
    ("cosine_with_restarts", {}),
    ("cosine_with_restarts", {"num_cycles": 3}),
    ("polynomial", {}),
    ("polynomial", {"power": 2.0, "lr_end": 1e-5}),
    ("constant", {}),
    ("constant_with_warmup", {}),
    ("inverse_sqrt", {}),
    ("inverse_sqrt", {"timescale": 7}),
    ("cosine_with_min_lr", {"min_lr": 1e-5}),
    ("cosine_with_min_lr", {"min_lr_rate": 0.1, "num_cycles": 0.75}),
    ("cosine_warmup_with_min_lr", {"min_lr": 1e-5}),
    ("cosine_warmup_with_min_lr", {"min_lr_rate": 0.1, "warmup_lr_rate": 0.2}),
    ("warmup_stable_decay", {"num_decay_steps": 5}),
    (
        "warmup_stable_decay",
        {"num_decay_steps": 4, "warmup_type": "cosine", "decay_type": "1-sqrt", "min_lr_ratio": 0.1},
    ),
    ("warmup_stable_decay", {"num_decay_steps": 6, "warmup_type": "1-sqrt", "decay_type": "linear"}),
]


def warmup_steps(warmup: float, total: int) -> int:
    """``TrainingArguments.get_warmup_steps``: an int, or a ratio (< 1) of the total steps rounded up."""
    return int(warmup) if warmup >= 1 else math.ceil(total * warmup)


# (warmup as given to TrainingArguments, num_training_steps); 15 < N exercises steps past the end
STEP_SETTINGS = [(0, N), (5, N), (0.1, N), (0.25, N), (3, 15)]


def _lrs(factory, name, kwargs, num_warmup, num_training):
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.SGD([param], lr=LR)
    scheduler = factory(name, optimizer, num_warmup, num_training, dict(kwargs))
    lrs = [optimizer.param_groups[0]["lr"]]
    for _ in range(N):
        optimizer.step()
        scheduler.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    return lrs


def test_every_transformers_scheduler_type_is_supported():
    """SCHEDULER_NAMES is exactly transformers' SchedulerType."""
    assert sorted(SCHEDULER_NAMES) == sorted(t.value for t in SchedulerType)


PUBLIC_BUILDERS = sorted(
    name
    for name in dir(transformers.optimization)
    if name.startswith("get_") and "schedule" in name and callable(getattr(transformers.optimization, name))
)


@pytest.mark.parametrize("name", PUBLIC_BUILDERS)
def test_public_schedule_builders_exist_with_the_same_parameters(name):
    """Every public get_*schedule* function of transformers.optimization exists here with the same parameters."""
    ours = getattr(hf_lightning.optim, name)
    theirs = getattr(transformers.optimization, name)
    ours_params = [(p.name, p.default) for p in inspect.signature(ours).parameters.values()]
    theirs_params = [(p.name, p.default) for p in inspect.signature(theirs).parameters.values()]
    assert ours_params == theirs_params


def test_parity_table_covers_every_step_driven_type():
    """Every schedule that is not metric-driven appears in the parity table."""
    assert {name for name, _ in CASES} == set(SCHEDULER_NAMES) - {"reduce_lr_on_plateau", "greedy"}


@pytest.mark.parametrize(("warmup", "total"), STEP_SETTINGS, ids=[f"w{w}-t{t}" for w, t in STEP_SETTINGS])
@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_learning_rate_after_every_step_matches(name, kwargs, warmup, total):
    """The learning rate after each of 20 steps equals transformers' to 1e-7."""
    num_warmup = warmup_steps(warmup, total)
    ours = _lrs(get_scheduler, name, kwargs, num_warmup, total)
    theirs = _lrs(hf_get_scheduler, name, kwargs, num_warmup, total)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-7)


def test_name_given_as_transformers_enum_matches():
    """A transformers SchedulerType member is accepted as the name."""
    ours = _lrs(get_scheduler, SchedulerType.COSINE, {}, 3, N)
    theirs = _lrs(hf_get_scheduler, SchedulerType.COSINE, {}, 3, N)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-7)


METRICS = [1.0, 0.9, 0.9, 0.95, 0.95, 0.95, 0.94, 0.8, 0.7, 0.6, 0.5, 0.4, 0.45, 0.45, 0.45, 0.45, 0.45, 0.3]

METRIC_CASES = [
    ("reduce_lr_on_plateau", {}),
    ("reduce_lr_on_plateau", {"patience": 1, "factor": 0.5}),
    ("reduce_lr_on_plateau", {"patience": 2, "factor": 0.3, "cooldown": 1, "mode": "max", "min_lr": 2e-4}),
    ("greedy", {}),
    ("greedy", {"patience": 1, "factor": 0.5, "min_lr": 1e-4, "max_lr": 5e-3}),
    (
        "greedy",
        {
            "patience": 1,
            "factor": 0.8,
            "cooldown": 1,
            "warmup": 1,
            "min_lr": 1e-4,
            "smooth": True,
            "window_size": 3,
        },
    ),
    ("greedy", {"patience": 0, "factor": 0.5, "min_lr": 6e-4, "reset_start": 2, "threshold_mode": "rel"}),
    ("greedy", {"patience": 1, "factor": 0.5, "mode": "max", "min_lr": 1e-4, "max_lr": 1e-2}),
]


def _metric_lrs(factory, name, kwargs):
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias], "lr": 2 * LR}], lr=LR)
    scheduler = factory(name, optimizer, None, None, dict(kwargs))
    lrs = []
    for metric in METRICS:
        optimizer.step()
        scheduler.step(metric)
        lrs.append([group["lr"] for group in optimizer.param_groups])
    return lrs, scheduler.state_dict()


@pytest.mark.parametrize(
    ("name", "kwargs"), METRIC_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(METRIC_CASES)]
)
def test_metric_driven_schedule_follows_the_same_metrics(name, kwargs):
    """reduce_lr_on_plateau and greedy react to one fixed metric sequence as transformers does."""
    ours, _ = _metric_lrs(get_scheduler, name, kwargs)
    theirs, _ = _metric_lrs(hf_get_scheduler, name, kwargs)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)


def test_greedy_state_dict_has_transformers_keys_and_values():
    """GreedyLR's state_dict matches transformers' key for key, so scheduler.pt is interchangeable."""
    kwargs = {"patience": 1, "factor": 0.8, "min_lr": 1e-4, "smooth": True, "window_size": 3}
    _, ours = _metric_lrs(get_scheduler, "greedy", kwargs)
    _, theirs = _metric_lrs(hf_get_scheduler, "greedy", kwargs)
    assert ours == theirs


def test_greedy_resumes_from_a_transformers_state_dict():
    """A GreedyLR restored from transformers' state continues exactly as transformers' own does."""
    kwargs = {"patience": 1, "factor": 0.5, "min_lr": 1e-4}
    _, state = _metric_lrs(hf_get_scheduler, "greedy", kwargs)
    results = []
    for factory in (get_scheduler, hf_get_scheduler):
        params = [torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))]
        optimizer = torch.optim.SGD([{"params": [p]} for p in params], lr=LR)
        scheduler = factory("greedy", optimizer, None, None, dict(kwargs))
        scheduler.load_state_dict(state)
        for metric in METRICS:
            scheduler.step(metric)
        results.append(scheduler.get_last_lr())
    assert results[0] == results[1]


REQUIRES_WARMUP = [n for n in SCHEDULER_NAMES if n not in ("constant", "reduce_lr_on_plateau", "greedy")]
REQUIRES_TOTAL = [
    n for n in REQUIRES_WARMUP if n not in ("constant_with_warmup", "inverse_sqrt", "warmup_stable_decay")
]
_MIN_LR = {"cosine_with_min_lr": {"min_lr": 1e-5}, "cosine_warmup_with_min_lr": {"min_lr": 1e-5}}


@pytest.mark.parametrize("name", REQUIRES_WARMUP)
def test_missing_warmup_steps_raises_like_transformers(name):
    """Both libraries raise ValueError naming num_warmup_steps when a schedule needs it."""
    kwargs = {"num_decay_steps": 2} if name == "warmup_stable_decay" else _MIN_LR.get(name, {})
    for factory in (get_scheduler, hf_get_scheduler):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)
        with pytest.raises(ValueError, match="num_warmup_steps"):
            factory(name, optimizer, None, N, dict(kwargs))


@pytest.mark.parametrize("name", REQUIRES_TOTAL)
def test_missing_training_steps_raises_like_transformers(name):
    """Both libraries raise ValueError naming num_training_steps when a schedule needs it."""
    for factory in (get_scheduler, hf_get_scheduler):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)
        with pytest.raises(ValueError, match="num_training_steps"):
            factory(name, optimizer, 2, None, dict(_MIN_LR.get(name, {})))


def test_wsd_without_training_or_stable_steps_raises_like_transformers():
    """warmup_stable_decay needs num_training_steps or num_stable_steps in both libraries."""
    for factory in (get_scheduler, hf_get_scheduler):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)
        with pytest.raises(ValueError, match="num_stable_steps"):
            factory("warmup_stable_decay", optimizer, 2, None, {"num_decay_steps": 3})


def test_wsd_with_stable_steps_and_no_training_steps_matches():
    """warmup_stable_decay built from num_stable_steps alone matches transformers."""
    kwargs = {"num_decay_steps": 5, "num_stable_steps": 8}
    torch.testing.assert_close(
        _lrs(get_scheduler, "warmup_stable_decay", kwargs, 4, None),
        _lrs(hf_get_scheduler, "warmup_stable_decay", kwargs, 4, None),
        rtol=0,
        atol=1e-7,
    )


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("cosine_with_min_lr", {}),
        ("cosine_with_min_lr", {"min_lr": 1e-5, "min_lr_rate": 0.1}),
        ("cosine_warmup_with_min_lr", {}),
        ("polynomial", {"lr_end": 1e-2}),
        ("warmup_stable_decay", {"num_decay_steps": 2, "decay_type": "exp"}),
    ],
)
def test_bad_scheduler_kwargs_raise_value_error_in_both(name, kwargs):
    """Invalid lr_scheduler_kwargs values raise ValueError in both libraries."""
    for factory in (get_scheduler, hf_get_scheduler):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)
        with pytest.raises(ValueError):
            factory(name, optimizer, 2, N, dict(kwargs))


@pytest.mark.parametrize("name", ["linear", "cosine", "inverse_sqrt", "cosine_with_min_lr"])
def test_unknown_scheduler_kwarg_raises_type_error_in_both(name):
    """An lr_scheduler_kwargs key the schedule does not take is a TypeError in both libraries."""
    kwargs = {"not_an_option": 1, **_MIN_LR.get(name, {})}
    for factory in (get_scheduler, hf_get_scheduler):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)
        with pytest.raises(TypeError):
            factory(name, optimizer, 2, N, dict(kwargs))


def test_scheduler_state_dict_loads_into_transformers_scheduler():
    """A LambdaLR state_dict from ours resumes transformers' schedule at the same learning rate."""
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=LR)
    ours = get_scheduler("cosine", optimizer, 3, N)
    for _ in range(7):
        optimizer.step()
        ours.step()
    state = ours.state_dict()
    optimizer2 = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)
    theirs = hf_get_scheduler("cosine", optimizer2, 3, N)
    theirs.load_state_dict(state)
    for _ in range(5):
        optimizer.step(), optimizer2.step()
        ours.step(), theirs.step()
    assert ours.get_last_lr() == pytest.approx(theirs.get_last_lr(), abs=1e-12)
    assert set(state) == set(theirs.state_dict())


def test_streaming_average_as_transformers():
    """``hf_lightning.optimization.StreamingAverage`` (GreedyLR's smoothing) keeps transformers' window and state."""
    from transformers.optimization import StreamingAverage as Theirs

    from hf_lightning.optimization import StreamingAverage as Ours

    ours, theirs = Ours(3), Theirs(3)
    values = [4.0, 1.5, -2.0, 8.0, 0.25, 3.0]
    assert [ours.streamavg(v) for v in values] == [theirs.streamavg(v) for v in values]
    assert ours.state_dict() == theirs.state_dict()
    again = Ours(9)
    again.load_state_dict(theirs.state_dict())
    assert again.streamavg(1.0) == theirs.streamavg(1.0)
