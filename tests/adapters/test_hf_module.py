"""HFModule in a plain lightning.Trainer: the path of an existing Lightning user."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from hf_lightning import TrainingArguments, default_data_collator
from hf_lightning.adapters import AccumulationWindows, HFModule
from tests.tiny import RegressionModel, causal_lm_data, regression_data, tiny_gpt2


def _trainer(**kwargs) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        **kwargs,
    )


def _mean_loss(model, data) -> float:
    model.eval()
    with torch.no_grad():
        batch = default_data_collator(data)
        return float(model(**batch).loss)


def test_plain_lightning_trainer_fits_tiny_gpt2_and_loss_falls():
    """L.Trainer().fit(HFModule(model, args), windows) trains: the loss on the training data falls."""
    text = torch.tensor(list(("abcabcabd " * 64).encode()))
    rows = text[: (len(text) // 16) * 16].view(-1, 16)
    data = [{"input_ids": r, "labels": r.clone()} for r in rows]
    model = tiny_gpt2(dropout=0.0)
    before = _mean_loss(model, data)
    args = TrainingArguments(learning_rate=5e-3, gradient_accumulation_steps=2, warmup_steps=2)
    loader = DataLoader(data, batch_size=4, shuffle=True, collate_fn=default_data_collator)
    trainer = _trainer(max_epochs=4)
    # _mean_loss left the model in eval mode: Lightning says so (HFModule trains in training mode anyway)
    with pytest.warns(UserWarning, match=r"module\(s\) in eval mode at the start of training"):
        trainer.fit(HFModule(model, args), train_dataloaders=AccumulationWindows(loader, 2))
    assert trainer.global_step == 4 * len(AccumulationWindows(loader, 2))  # optimizer updates
    assert _mean_loss(model, data) < 0.5 * before


def test_hf_module_matches_hf_lightning_trainer_numbers(tmp_path):
    """HFModule alone and hf_lightning.Trainer give the same weights for the same work (sequential data)."""
    import hf_lightning

    args_kwargs = dict(
        learning_rate=0.05,
        gradient_accumulation_steps=3,
        per_device_train_batch_size=4,
        max_steps=4,
        lr_scheduler_type="linear",
        warmup_steps=1,
        train_sampling_strategy="sequential",
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
    )
    data = regression_data(48)
    facade = hf_lightning.Trainer(
        model=RegressionModel(),
        train_dataset=data,
        args=TrainingArguments(output_dir=str(tmp_path), **args_kwargs),
    )
    facade.train()
    module_model = RegressionModel()
    loader = DataLoader(data, batch_size=4, shuffle=False, collate_fn=default_data_collator)
    trainer = _trainer(max_steps=4)
    trainer.fit(
        HFModule(module_model, TrainingArguments(output_dir=str(tmp_path), **args_kwargs)),
        train_dataloaders=AccumulationWindows(loader, 3),
    )
    for a, b in zip(facade.model.parameters(), module_model.parameters()):
        torch.testing.assert_close(a, b)


def test_single_batches_with_accumulation_give_a_clear_error():
    """A plain DataLoader with gradient_accumulation_steps > 1 raises, naming AccumulationWindows."""
    loader = DataLoader(causal_lm_data(n=4), batch_size=2, collate_fn=default_data_collator)
    module = HFModule(tiny_gpt2(), TrainingArguments(gradient_accumulation_steps=2))
    with pytest.raises(ValueError, match="AccumulationWindows"):
        _trainer(max_steps=1).fit(module, train_dataloaders=loader)


def test_arguments_not_carried_yet_are_refused_by_the_module_too():
    """HFModule(model, args) under a plain lightning.Trainer refuses what nobody carries, naming each."""
    args = TrainingArguments(debug="underflow_overflow", accelerator_config={"split_batches": True})
    with pytest.raises(NotImplementedError) as caught:
        HFModule(tiny_gpt2(), args)
    assert "`TrainingArguments(debug=" in str(caught.value)
    assert "`TrainingArguments(accelerator_config={'split_batches': True" in str(caught.value)
    assert "is honoured by hf_lightning.Trainer only" in str(caught.value)
    HFModule(tiny_gpt2(), TrainingArguments(accelerator_config={"split_batches": False}))  # the defaults pass


def test_windows_hold_the_remainder_of_an_epoch():
    """10 micro-batches in windows of 4 give 3 windows: 4, 4 and the remaining 2."""
    windows = AccumulationWindows(list(range(10)), 4)
    assert len(windows) == 3
    assert [len(w) for w in windows] == [4, 4, 2]
    with pytest.raises(ValueError, match="steps"):
        AccumulationWindows([], 0)


def test_layers_unfrozen_mid_training_are_trained_and_zeroed(tmp_path):
    """A parameter frozen at the start and unfrozen by a callback trains, and its gradient is cleared each step."""
    import hf_lightning

    class Unfreeze(hf_lightning.TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step == 1:
                model.b.requires_grad_(True)

    model = RegressionModel()
    model.b.requires_grad_(False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # holds b, frozen for now
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        max_steps=3,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
    )
    trainer = hf_lightning.Trainer(
        model=model,
        args=args,
        train_dataset=regression_data(16),
        callbacks=[Unfreeze()],
        optimizers=(optimizer, None),
    )
    trainer.train()
    assert float(model.b.detach()) != 0.0  # trained after the unfreeze
    assert model.b.grad is None  # cleared after the last step, not accumulated


def test_attribute_assignment_keeps_torch_semantics():
    """HFModule's fast attribute path stores plain values only; modules, parameters and None keep torch's rules."""
    module = HFModule(RegressionModel())
    module.window_size = 3  # plain value: stored, no registration
    assert module.window_size == 3 and "window_size" not in dict(module.named_parameters())
    module.head = torch.nn.Linear(1, 1)  # a submodule is registered
    assert "head.weight" in dict(module.named_parameters())
    module.scale = torch.nn.Parameter(torch.ones(()))
    assert "scale" in dict(module.named_parameters())
    module.scale = None  # None on a registered parameter keeps the slot, as nn.Module does
    assert "scale" in module._parameters and module._parameters["scale"] is None
    with pytest.raises(TypeError, match="scale"):
        module.scale = 1.0  # a plain value cannot replace a parameter slot
    module.head = None
    assert module._modules["head"] is None
    module.automatic_optimization = True  # a Lightning property: its setter runs
    assert module.automatic_optimization is True


class _BackwardCounter(L.Callback):
    """A Lightning callback that listens to the backward hooks."""

    def __init__(self) -> None:
        self.before = self.after = 0

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.before += 1

    def on_after_backward(self, trainer, pl_module) -> None:
        self.after += 1


class _PathSeen(L.Callback):
    """Records, at the end of each training batch, whether the module took the direct backward."""

    def __init__(self) -> None:
        self.seen: set[bool | None] = set()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.seen.add(pl_module._plain_backward)


def _fit_regression(tmp_path, callbacks=(), module_cls=HFModule, **trainer_kwargs):
    args = TrainingArguments(
        output_dir=str(tmp_path),
        learning_rate=0.05,
        gradient_accumulation_steps=3,
        max_steps=4,
        warmup_steps=1,
        lr_scheduler_type="linear",
    )
    loader = DataLoader(regression_data(48), batch_size=4, shuffle=False, collate_fn=default_data_collator)
    module = module_cls(RegressionModel(), args)
    trainer = _trainer(max_steps=4, callbacks=list(callbacks), **trainer_kwargs)
    trainer.fit(module, train_dataloaders=AccumulationWindows(loader, 3))
    return module


def test_backward_hooks_run_when_something_listens_and_the_numbers_do_not_depend_on_it(tmp_path):
    """With nothing listening, ``manual_backward`` goes straight to autograd; a Lightning callback or a
    module that overrides a backward hook gets every call, and the trained weights are the same."""
    direct = _fit_regression(tmp_path)
    counter = _BackwardCounter()
    hooked = _fit_regression(tmp_path, callbacks=[counter])
    assert (counter.before, counter.after) == (12, 12)  # 4 updates x 3 micro-batches

    class Module(HFModule):
        calls = 0

        def on_after_backward(self) -> None:
            type(self).calls += 1

    overriding = _fit_regression(tmp_path, module_cls=Module)
    assert Module.calls == 12
    for a, b, c in zip(direct.model.parameters(), hooked.model.parameters(), overriding.model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        torch.testing.assert_close(a, c, rtol=0, atol=0)


def test_only_a_plain_setup_skips_lightnings_backward_path(tmp_path):
    """32-bit precision on one device with the pass-through profiler and no listening hook: direct;
    mixed precision, a profiler or a listening callback: Lightning's path (which scales, records, and
    calls the hooks). The decision is made per fit and forgotten after it."""
    cases = [
        ({}, True),
        ({"precision": "bf16-mixed"}, False),
        ({"profiler": "simple"}, False),
        ({"callbacks": [_BackwardCounter()]}, False),
    ]
    for kwargs, expected in cases:
        seen = _PathSeen()
        kwargs = dict(kwargs)
        module = _fit_regression(tmp_path, callbacks=[seen, *kwargs.pop("callbacks", [])], **kwargs)
        assert seen.seen == {expected}, kwargs
        assert module._plain_backward is None


def test_cpu_batches_are_left_to_the_driver_that_places_them():
    """On the CPU, Lightning's transfer is skipped only when the driver moves each micro-batch itself
    (``hf_lightning.Trainer._prepare_inputs``); a standalone module keeps Lightning's transfer."""
    window = [{"x": torch.ones(2)}]

    class Placing:
        places_inputs = True

        def bind(self, module) -> None: ...

    cpu = torch.device("cpu")
    assert HFModule(RegressionModel(), driver=Placing()).transfer_batch_to_device(window, cpu, 0) is window
    moved = HFModule(RegressionModel()).transfer_batch_to_device(window, cpu, 0)
    assert moved is not window and torch.equal(moved[0]["x"], window[0]["x"])
    meta = HFModule(RegressionModel(), driver=Placing()).transfer_batch_to_device(
        window, torch.device("meta"), 0
    )
    assert meta[0]["x"].device.type == "meta"  # any other device: Lightning moves the window


def test_module_reads_the_settings_it_is_given():
    """HFModule(model, args, settings=plan.module) keeps that group and reads nothing else."""
    from hf_lightning.adapters import to_lightning

    plan = to_lightning(TrainingArguments(output_dir="out", gradient_accumulation_steps=3))
    module = HFModule(RegressionModel(), TrainingArguments(output_dir="out"), settings=plan.module)
    assert module.settings is plan.module
    assert module.settings.gradient_accumulation_steps == 3


def test_module_translates_the_arguments_once():
    """Arguments changed after HFModule is built change nothing: the module reads its settings."""
    args = TrainingArguments(output_dir="out", max_grad_norm=0.5, lr_scheduler_type="cosine")
    module = HFModule(RegressionModel(), args)
    args.max_grad_norm, args.lr_scheduler_type = 2.0, "constant"
    assert (module.settings.max_grad_norm, module.settings.lr_scheduler_type) == (0.5, "cosine")


def test_module_builds_the_scheduler_of_its_settings():
    """With no scheduler given, HFModule builds lr_scheduler_type with the resolved warm-up steps."""
    args = TrainingArguments(
        output_dir="out", learning_rate=1.0, warmup_steps=0.5, lr_scheduler_type="linear"
    )
    loader = DataLoader(regression_data(16), batch_size=4, collate_fn=default_data_collator)
    module = HFModule(RegressionModel(), args)
    _trainer(max_steps=4).fit(module, train_dataloaders=loader)
    # 2 warm-up steps of 4, then linear decay to 0: the last update used lr 1/2 -> scheduler at 0
    assert module.hf_lr_scheduler.get_last_lr()[0] == 0.0
    assert module.hf_lr_scheduler.lr_lambdas[0](1) == 0.5


@pytest.mark.parametrize(
    "make,expected",
    [
        (lambda opt: None, False),
        (lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0), True),
        (lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt), False),
        (lambda opt: __import__("hf_lightning.optim", fromlist=["GreedyLR"]).GreedyLR(opt), False),
    ],
    ids=["none", "lambda", "plateau", "greedy"],
)
def test_scheduler_steps_per_update_unless_metric_driven(make, expected):
    """steps_per_update: a schedule steps after every update; ReduceLROnPlateau and GreedyLR step on a metric."""
    from hf_lightning.optim import steps_on_metric, steps_per_update

    scheduler = make(torch.optim.SGD(RegressionModel().parameters(), lr=0.1))
    assert steps_per_update(scheduler) is expected
    assert steps_on_metric(scheduler) is (scheduler is not None and not expected)


def test_metric_driven_names_build_schedulers_that_step_on_a_metric():
    """Each lr_scheduler_type in METRIC_DRIVEN_SCHEDULERS builds a scheduler HFModule does not step per update."""
    from hf_lightning.optim import METRIC_DRIVEN_SCHEDULERS, get_scheduler, steps_per_update

    optimizer = torch.optim.SGD(RegressionModel().parameters(), lr=0.1)
    assert [steps_per_update(get_scheduler(name, optimizer)) for name in METRIC_DRIVEN_SCHEDULERS] == [
        False,
        False,
    ]
