"""``to_lightning``: each mapped argument, by table; a real lightning.Trainer; printing; purity."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import logging
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.strategies import DDPStrategy

from hf_lightning.adapters.plan import LightningPlan, eval_settings, to_lightning
from hf_lightning.args.training_args import TrainingArguments

TWO_PROCESSES = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}


def _plan(tmp_path=None, env=None, steps_per_epoch=None, cuda=False, **kwargs) -> LightningPlan:
    kwargs.setdefault("output_dir", str(tmp_path) if tmp_path is not None else "out")
    return to_lightning(
        TrainingArguments(**kwargs), env=env, num_update_steps_per_epoch=steps_per_epoch, cuda_available=cuda
    )


def _get(plan: LightningPlan, path: str):
    value = plan
    for part in path.split("."):
        value = value[part] if isinstance(value, MappingProxyType | dict) else getattr(value, part)
    return value


# (arguments, to_lightning keywords, plan attribute, expected value)
ROWS = [
    # precision
    ({}, {}, "trainer_kwargs.precision", "32-true"),
    ({"bf16": True}, {}, "trainer_kwargs.precision", "bf16-mixed"),
    ({"fp16": True}, {"cuda": True}, "trainer_kwargs.precision", "16-mixed"),
    ({"fp16": True, "use_cpu": True}, {"cuda": True}, "trainer_kwargs.precision", "32-true"),  # as accelerate
    ({"bf16": True}, {}, "precision", "bf16-mixed"),
    ({}, {}, "eval_precision", None),
    ({}, {}, "eval_dtype", None),
    ({"bf16_full_eval": True}, {}, "eval_precision", "bf16-true"),
    ({"bf16_full_eval": True}, {}, "eval_dtype", torch.bfloat16),
    ({"fp16_full_eval": True}, {}, "eval_precision", "16-true"),
    ({"fp16_full_eval": True}, {}, "eval_dtype", torch.float16),
    ({"bf16_full_eval": True}, {}, "trainer_kwargs.precision", "32-true"),
    ({"tf32": False}, {}, "tf32", False),
    # devices
    ({}, {}, "trainer_kwargs.accelerator", "auto"),
    ({}, {"cuda": True}, "trainer_kwargs.accelerator", "cuda"),
    ({"use_cpu": True}, {"cuda": True}, "trainer_kwargs.accelerator", "cpu"),
    ({}, {}, "trainer_kwargs.devices", 1),
    ({}, {}, "trainer_kwargs.num_nodes", 1),
    ({"use_cpu": True}, {}, "data.dataloader_pin_memory", False),
    ({}, {}, "data.dataloader_pin_memory", True),
    # duration
    ({"max_steps": 7}, {}, "trainer_kwargs.max_steps", 7),
    ({"max_steps": 7}, {}, "trainer_kwargs.max_epochs", -1),
    ({"max_steps": 7, "num_train_epochs": 2.5}, {"steps_per_epoch": 4}, "trainer_kwargs.max_steps", 7),
    ({"num_train_epochs": 2.5}, {"steps_per_epoch": 4}, "trainer_kwargs.max_steps", 10),
    ({"num_train_epochs": 2.5}, {"steps_per_epoch": 4}, "trainer_kwargs.max_epochs", 3),
    ({"num_train_epochs": 0.3}, {"steps_per_epoch": 5}, "trainer_kwargs.max_steps", 2),
    ({"num_train_epochs": 0.3}, {"steps_per_epoch": 5}, "trainer_kwargs.max_epochs", 1),
    ({"num_train_epochs": 3}, {"steps_per_epoch": 5}, "trainer_kwargs.max_steps", 15),
    ({"num_train_epochs": 3}, {}, "trainer_kwargs.max_steps", -1),
    ({"num_train_epochs": 3}, {}, "trainer_kwargs.max_epochs", 3),
    ({"num_train_epochs": 3}, {"steps_per_epoch": 5}, "num_update_steps_per_epoch", 5),
    # determinism and seeds
    ({}, {}, "trainer_kwargs.deterministic", None),
    ({"full_determinism": True}, {}, "trainer_kwargs.deterministic", True),
    ({"full_determinism": True}, {}, "trainer_kwargs.benchmark", False),
    ({"full_determinism": True}, {}, "full_determinism", True),
    ({"seed": 7}, {}, "seed", 7),
    ({"seed": 7}, {}, "data.sampler_seed", 7),
    ({"seed": 7, "data_seed": 11}, {}, "data.sampler_seed", 11),
    # progress bar and logging
    ({}, {}, "trainer_kwargs.enable_progress_bar", True),
    ({"disable_tqdm": True}, {}, "trainer_kwargs.enable_progress_bar", False),
    ({"logging_steps": 25}, {}, "trainer_kwargs.log_every_n_steps", 25),
    ({"logging_steps": 0.1, "max_steps": 50}, {}, "trainer_kwargs.log_every_n_steps", 5),
    ({"logging_steps": 0.1}, {}, "trainer_kwargs.log_every_n_steps", None),
    ({"logging_strategy": "epoch"}, {}, "trainer_kwargs.log_every_n_steps", None),
    ({}, {}, "trainer_kwargs.logger", False),
    ({"report_to": "none"}, {}, "logger_specs", ()),
    # fixed by design, whatever the arguments
    ({"gradient_accumulation_steps": 4}, {}, "trainer_kwargs.accumulate_grad_batches", 1),
    ({"max_grad_norm": 0.5}, {}, "trainer_kwargs.gradient_clip_val", None),
    ({"save_strategy": "no"}, {}, "trainer_kwargs.enable_checkpointing", False),
    ({}, {}, "trainer_kwargs.use_distributed_sampler", False),
    ({}, {}, "trainer_kwargs.num_sanity_val_steps", 0),
    ({}, {}, "trainer_kwargs.enable_model_summary", False),
    ({"output_dir": "runs/exp"}, {}, "trainer_kwargs.default_root_dir", "runs/exp"),
    ({}, {}, "trainer_kwargs.plugins", None),
    # HFModule settings
    ({"gradient_accumulation_steps": 4}, {}, "module.gradient_accumulation_steps", 4),
    ({"max_grad_norm": 0.5}, {}, "module.max_grad_norm", 0.5),
    ({"average_tokens_across_devices": False}, {}, "module.average_tokens_across_devices", False),
    ({"label_smoothing_factor": 0.1}, {}, "module.label_smoothing_factor", 0.1),
    ({"logging_nan_inf_filter": False}, {}, "module.logging_nan_inf_filter", False),
    ({"include_num_input_tokens_seen": True}, {}, "module.include_num_input_tokens_seen", "all"),
    (
        {"include_num_input_tokens_seen": "non_padding"},
        {},
        "module.include_num_input_tokens_seen",
        "non_padding",
    ),
    ({"neftune_noise_alpha": 5.0}, {}, "module.neftune_noise_alpha", 5.0),
    ({"torch_empty_cache_steps": 3}, {}, "module.torch_empty_cache_steps", 3),
    ({}, {}, "module.torch_compile", False),
    ({"torch_compile": True}, {}, "module.torch_compile_backend", "inductor"),
    ({"torch_compile_mode": "reduce-overhead"}, {}, "module.torch_compile", True),
    ({"torch_compile_backend": "aot_eager"}, {}, "module.torch_compile_backend", "aot_eager"),
    ({"activation_checkpointing": True}, {}, "module.activation_checkpointing", True),
    (
        {"activation_checkpointing": True, "activation_checkpointing_kwargs": {"use_reentrant": False}},
        {},
        "module.activation_checkpointing_kwargs",
        {"use_reentrant": False},
    ),
    # data settings
    ({"per_device_train_batch_size": 3}, {}, "data.per_device_train_batch_size", 3),
    ({"dataloader_drop_last": True}, {}, "data.dataloader_drop_last", True),
    ({"dataloader_num_workers": 2}, {}, "data.dataloader_num_workers", 2),
    (
        {"dataloader_num_workers": 2, "dataloader_prefetch_factor": 4},
        {},
        "data.dataloader_prefetch_factor",
        4,
    ),
    ({"train_sampling_strategy": "group_by_length"}, {}, "data.train_sampling_strategy", "group_by_length"),
    ({"length_column_name": "n"}, {}, "data.length_column_name", "n"),
    ({"remove_unused_columns": False}, {}, "data.remove_unused_columns", False),
    ({"label_names": ["start", "end"]}, {}, "data.label_names", ("start", "end")),
    # scheduler settings (HFModule builds the scheduler when it is given none)
    ({}, {}, "module.lr_scheduler_type", "linear"),
    ({"lr_scheduler_type": "cosine"}, {}, "module.lr_scheduler_type", "cosine"),
    ({"lr_scheduler_kwargs": {"num_cycles": 2}}, {}, "module.lr_scheduler_kwargs", {"num_cycles": 2}),
    ({"warmup_steps": 0.25}, {}, "module.warmup_steps", 0.25),
    # the fit's own switches
    ({}, {}, "enable_jit_checkpoint", False),
    ({"enable_jit_checkpoint": True}, {}, "enable_jit_checkpoint", True),
    ({"log_level": "error"}, {}, "process_log_level", logging.ERROR),
    # distributed: launcher variables decide
    ({}, {}, "trainer_kwargs.strategy", "auto"),
    ({"ddp_find_unused_parameters": False}, {}, "trainer_kwargs.strategy", "auto"),
    ({}, {"env": TWO_PROCESSES}, "trainer_kwargs.devices", 2),
    ({}, {"env": {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}}, "trainer_kwargs.devices", 2),
    ({}, {"env": {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}}, "trainer_kwargs.num_nodes", 2),
    ({}, {"env": TWO_PROCESSES}, "distributed.find_unused_parameters", True),
    ({"activation_checkpointing": True}, {"env": TWO_PROCESSES}, "distributed.find_unused_parameters", False),
    (
        {"ddp_find_unused_parameters": False},
        {"env": TWO_PROCESSES},
        "strategy._ddp_kwargs.find_unused_parameters",
        False,
    ),
    ({"ddp_bucket_cap_mb": 10}, {"env": TWO_PROCESSES}, "strategy._ddp_kwargs.bucket_cap_mb", 10),
    (
        {"ddp_broadcast_buffers": False},
        {"env": TWO_PROCESSES},
        "strategy._ddp_kwargs.broadcast_buffers",
        False,
    ),
    ({"ddp_static_graph": True}, {"env": TWO_PROCESSES}, "strategy._ddp_kwargs.static_graph", True),
    ({"ddp_timeout": 60}, {"env": TWO_PROCESSES}, "strategy._timeout", timedelta(seconds=60)),
    ({"ddp_backend": "gloo"}, {"env": TWO_PROCESSES}, "strategy.process_group_backend", "gloo"),
    ({}, {"env": TWO_PROCESSES}, "strategy.process_group_backend", None),
]


@pytest.mark.parametrize(
    "arguments,options,path,expected", ROWS, ids=[f"{row[2]}<-{row[0]}{row[1] or ''}" for row in ROWS]
)
def test_argument_maps_to(arguments, options, path, expected):
    """Each mapped argument lands in the expected place of the plan."""
    assert _get(_plan(**options, **arguments), path) == expected


def test_ddp_strategy_under_a_launcher():
    """WORLD_SIZE > 1 gives a DDPStrategy carrying every ddp_* argument."""
    plan = _plan(
        env=TWO_PROCESSES,
        ddp_find_unused_parameters=False,
        ddp_bucket_cap_mb=25,
        ddp_broadcast_buffers=False,
        ddp_backend="gloo",
        ddp_timeout=120,
    )
    assert isinstance(plan.trainer_kwargs["strategy"], DDPStrategy)
    assert plan.distributed.ddp_kwargs() == {
        "find_unused_parameters": False,
        "bucket_cap_mb": 25,
        "broadcast_buffers": False,
    }
    assert plan.strategy._ddp_kwargs == plan.distributed.ddp_kwargs()  # no public accessor in Lightning


@pytest.mark.parametrize(
    "report_to,logger_class", [("tensorboard", TensorBoardLogger), ("csv", CSVLogger), (["csv"], CSVLogger)]
)
def test_report_to_builds_the_lightning_logger(tmp_path, report_to, logger_class):
    """report_to names the Lightning logger that trainer_kwargs carries."""
    plan = _plan(tmp_path, report_to=report_to)
    (logger,) = plan.trainer_kwargs["logger"]
    assert isinstance(logger, logger_class)
    assert logger.save_dir == str(tmp_path)


def test_report_to_several_loggers_keeps_order(tmp_path):
    """Several trackers give one logger each, in the order given."""
    plan = _plan(tmp_path, report_to=["csv", "tensorboard"])
    assert [type(logger) for logger in plan.loggers] == [CSVLogger, TensorBoardLogger]


def test_tensorboard_logging_dir_from_env(tmp_path):
    """TENSORBOARD_LOGGING_DIR (passed in env) is where TensorBoard writes, as in transformers."""
    plan = _plan(tmp_path, env={"TENSORBOARD_LOGGING_DIR": str(tmp_path / "tb")}, report_to="tensorboard")
    assert plan.loggers[0].log_dir.rstrip("/") == str(tmp_path / "tb")


def test_tensorboard_uses_run_name_as_version(tmp_path):
    """run_name names the TensorBoard run folder under output_dir/runs."""
    plan = _plan(tmp_path, report_to="tensorboard", run_name="exp1")
    assert plan.loggers[0].log_dir == str(tmp_path / "runs" / "exp1")


def test_loggers_in_trainer_kwargs_are_the_plans_loggers(tmp_path):
    """trainer_kwargs holds the very logger objects of plan.loggers, built once."""
    plan = _plan(tmp_path, report_to="csv")
    assert plan.trainer_kwargs["logger"][0] is plan.loggers[0]


@pytest.mark.parametrize("name,package", [("mlflow", "mlflow"), ("wandb", "wandb"), ("comet_ml", "comet-ml")])
def test_optional_tracker(tmp_path, name, package):
    """mlflow, wandb and comet_ml are described by a spec, or name the pip install that is missing."""
    if importlib.util.find_spec(name) is None:
        with pytest.raises(ImportError, match=f"pip install {package}"):
            _plan(tmp_path, report_to=name)
    else:
        assert _plan(tmp_path, report_to=name).logger_specs[0].name == name


@pytest.mark.parametrize("value", ["foo", "clearml", ["csv", "nope"]])
def test_report_to_unknown_value_is_refused(value):
    """An unknown report_to raises ValueError naming the value and the supported ones."""
    args = TrainingArguments(output_dir="out")
    args.report_to = value
    with pytest.raises(ValueError, match=r"report_to=.*choose from: 'tensorboard', 'csv'"):
        to_lightning(args)


def test_fractional_epochs_need_steps_per_epoch():
    """Fractional num_train_epochs without num_update_steps_per_epoch is refused, naming both."""
    with pytest.raises(ValueError, match=r"num_train_epochs=2\.5.*num_update_steps_per_epoch"):
        _plan(num_train_epochs=2.5)


@pytest.mark.parametrize("steps", [0, -3, 2.5, True])
def test_bad_steps_per_epoch_is_refused(steps):
    """num_update_steps_per_epoch must be a positive int."""
    with pytest.raises(ValueError, match="num_update_steps_per_epoch"):
        _plan(steps_per_epoch=steps)


@pytest.mark.parametrize(
    "env,match",
    [
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE='two'"),
        ({"WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_WORLD_SIZE=2"),
    ],
)
def test_bad_launcher_variables_are_refused(env, match):
    """Unusable launcher variables raise ValueError naming them."""
    with pytest.raises(ValueError, match=match):
        _plan(env=env)


def test_unknown_ddp_backend_is_refused():
    """ddp_backend outside the known backends raises ValueError listing them."""
    args = TrainingArguments(output_dir="out")
    args.ddp_backend = "carrier-pigeon"
    with pytest.raises(
        ValueError, match=r"ddp_backend='carrier-pigeon'.*'nccl', 'mpi', 'xccl', 'gloo', 'hccl'"
    ):
        to_lightning(args)


def test_not_yet_arguments_are_refused():
    """Arguments nobody carries yet raise one NotImplementedError naming each."""
    args = TrainingArguments(
        output_dir="out", accelerator_config={"split_batches": True}, debug="underflow_overflow"
    )
    args.parallelism_config = {"tp_size": 2}
    with pytest.raises(NotImplementedError) as caught:
        to_lightning(args)
    assert "`TrainingArguments(accelerator_config={'split_batches': True" in str(caught.value)
    assert "is honoured by hf_lightning.Trainer only" in str(caught.value)  # a Lightning user's DataLoader
    assert "is not supported by hf_lightning yet" in str(caught.value)
    assert "`TrainingArguments(debug=" in str(caught.value)
    to_lightning(
        TrainingArguments(output_dir="out", accelerator_config={"split_batches": True}), by_trainer=True
    )


def test_trainer_kwargs_build_a_lightning_trainer(tmp_path):
    """The plan's trainer_kwargs construct a real lightning.Trainer on CPU."""
    plan = _plan(tmp_path, use_cpu=True, bf16=True, max_steps=3, report_to="csv", logging_steps=2)
    trainer = L.Trainer(**plan.trainer_kwargs)
    assert trainer.max_steps == 3
    assert trainer.accumulate_grad_batches == 1
    assert trainer.gradient_clip_val is None
    assert trainer.checkpoint_callback is None
    assert trainer.log_every_n_steps == 2
    assert trainer.precision == "bf16-mixed"
    assert trainer.default_root_dir == str(tmp_path)
    assert isinstance(trainer.logger, CSVLogger)


def test_plan_prints_trainer_call_and_carriers(tmp_path):
    """str(plan) shows the lightning.Trainer call, the strategy and each argument set with its carrier."""
    text = str(_plan(tmp_path, bf16=True, use_cpu=True, gradient_accumulation_steps=4, report_to="csv"))
    assert "lightning.Trainer(" in text and "precision='bf16-mixed'," in text
    assert "strategy: 'auto'" in text
    assert "CSVLogger(save_dir=" in text
    assert "bf16=True -> lightning.Trainer(precision='bf16-mixed')" in text
    assert "gradient_accumulation_steps=4 -> HFModule" in text


def test_plan_prints_ddp_strategy():
    """Under a launcher the printed strategy is the DDPStrategy call."""
    text = _plan(env=TWO_PROCESSES, ddp_backend="gloo").describe()
    assert "strategy: DDPStrategy(process_group_backend='gloo', timeout=timedelta(seconds=1800)" in text


def test_same_arguments_give_equal_plans():
    """to_lightning is deterministic: the same arguments twice give equal plans and equal text."""
    args = TrainingArguments(output_dir="out", bf16=True, report_to="tensorboard", seed=3)
    first, second = to_lightning(args), to_lightning(args)
    assert first == second
    assert str(first) == str(second)


def test_process_environment_is_not_read(monkeypatch):
    """Launcher and tracker variables in os.environ change nothing unless passed as env."""
    args = TrainingArguments(output_dir="out", report_to="tensorboard")
    before = to_lightning(args)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", "/elsewhere")
    assert to_lightning(args) == before


def test_arguments_are_not_modified():
    """to_lightning leaves its arguments untouched."""
    args = TrainingArguments(output_dir="out", num_train_epochs=2.5, report_to=["csv"])
    snapshot = dataclasses.replace(args)
    to_lightning(args, num_update_steps_per_epoch=4)
    assert args == snapshot


def test_carriers_name_every_field():
    """plan.carriers has the carrier of every TrainingArguments field."""
    carriers = _plan().carriers
    assert set(carriers) == {f.name for f in dataclasses.fields(TrainingArguments)}
    assert carriers["ddp_bucket_cap_mb"].startswith("DDPStrategy")


def test_plan_is_frozen():
    """A plan cannot be changed after it is made."""
    plan = _plan()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.seed = 1


@pytest.mark.parametrize("use_cpu", [False, True])
def test_pin_memory_is_what_transformers_passes(use_cpu):
    """data.dataloader_pin_memory is transformers' DataLoader pin_memory: the argument after __post_init__."""
    from transformers import TrainingArguments as HFTrainingArguments

    hf_args = HFTrainingArguments(output_dir="out", use_cpu=use_cpu, report_to="none")
    assert _plan(use_cpu=use_cpu).data.dataloader_pin_memory is hf_args.dataloader_pin_memory


def test_pin_memory_follows_the_argument_not_use_cpu():
    """The plan passes dataloader_pin_memory as set, as transformers does, without re-reading use_cpu."""
    args = TrainingArguments(output_dir="out", use_cpu=True)
    args.dataloader_pin_memory = True
    assert to_lightning(args).data.dataloader_pin_memory is True


@pytest.mark.parametrize("cuda,pinned", [(False, False), (True, True)])
def test_loader_kwargs_pin_memory_only_with_cuda(cuda, pinned):
    """loader_kwargs pins memory when dataloader_pin_memory asks for it and CUDA is there (docs/divergences.md)."""
    assert _plan(cuda=cuda).data.loader_kwargs()["pin_memory"] is pinned


def test_loader_kwargs_without_workers_leave_out_the_worker_options():
    """With no workers, loader_kwargs has no prefetch_factor, multiprocessing_context or in_order."""
    kwargs = _plan(dataloader_pin_memory=False).data.loader_kwargs()
    assert kwargs == {"num_workers": 0, "pin_memory": False, "persistent_workers": False}


def test_loader_kwargs_with_workers_carry_the_worker_options():
    """With workers, loader_kwargs carries every dataloader_* argument."""
    plan = _plan(cuda=True, dataloader_num_workers=2, dataloader_prefetch_factor=3, dataloader_in_order=False)
    assert plan.data.loader_kwargs() == {
        "num_workers": 2,
        "pin_memory": True,
        "persistent_workers": False,
        "prefetch_factor": 3,
        "multiprocessing_context": None,
        "in_order": False,
    }


def test_loader_kwargs_build_a_dataloader():
    """loader_kwargs() are valid torch DataLoader keyword arguments."""
    loader = torch.utils.data.DataLoader(
        list(range(4)), batch_size=2, **_plan(use_cpu=True).data.loader_kwargs()
    )
    assert [batch.tolist() for batch in loader] == [[0, 1], [2, 3]]


@pytest.mark.parametrize(
    "arguments,field,expected",
    [
        ({"use_cpu": True}, "device", torch.device("cpu")),
        ({}, "mixed_precision", None),
        ({"bf16": True}, "mixed_precision", "bf16-mixed"),
        ({"fp16_full_eval": True}, "eval_dtype", torch.float16),
        ({"bf16_full_eval": True}, "eval_dtype", torch.bfloat16),
        ({"ddp_backend": "gloo"}, "process_group_backend", "gloo"),
        ({"ddp_timeout": 60}, "timeout_s", 60),
    ],
)
def test_eval_settings(arguments, field, expected):
    """eval_settings(args) carries what a standalone evaluation needs."""
    settings = eval_settings(TrainingArguments(output_dir="out", **arguments))
    assert getattr(settings, field) == expected


# The engine reads no TrainingArguments field: it receives the plan's groups and factories. The only
# readers are the plan builder (to_lightning) and the HF tracker callbacks, which receive the arguments in
# every event by transformers' callback contract (as transformers' own TensorBoardCallback reads them).
ARGUMENT_READERS = {
    "plan.py": ("to_lightning", "_trainer_settings", "_duration", "_log_every_n_steps"),
    "callbacks/reporting.py": ("on_train_begin", "reporting_callbacks"),
    "callbacks/logging.py": ("on_train_begin",),
    "callbacks/trackio.py": ("TrackioReporter",),
}


def _engine_files() -> list[str]:
    import hf_lightning.adapters as adapters

    root = Path(adapters.__file__).parent
    return sorted(str(path.relative_to(root)) for path in root.rglob("*.py"))


def _argument_reads(tree: ast.AST) -> list[str]:
    """``args.<field>`` / ``self.args.<field>`` / ``x.args.<field>`` attribute reads in ``tree``."""
    reads = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if (isinstance(owner, ast.Name) and owner.id == "args") or (
            isinstance(owner, ast.Attribute) and owner.attr == "args"
        ):
            reads.append(f"line {node.lineno}: .args.{node.attr}")
    return reads


def test_the_guard_walks_the_whole_engine():
    """Every engine file is checked (none listed by hand), the allow-list names only files that exist."""
    files = _engine_files()
    assert {"module.py", "fit.py", "evaluation.py", "callbacks/loop_driver.py"} <= set(files)
    assert set(ARGUMENT_READERS) <= set(files)
    for filename, exempt in ARGUMENT_READERS.items():  # each exemption names a definition that reads them
        tree = ast.parse(
            (Path(__import__("hf_lightning.adapters").adapters.__file__).parent / filename).read_text()
        )
        named = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
        assert all(name in named and _argument_reads(named[name]) for name in exempt), filename


@pytest.mark.parametrize("filename", _engine_files())
def test_engine_file_reads_no_argument_field(filename):
    """No engine file reads a ``TrainingArguments`` field, except the plan builder and the tracker callbacks."""
    import hf_lightning.adapters as adapters

    exempt = ARGUMENT_READERS.get(filename, ())
    source = (Path(adapters.__file__).parent / filename).read_text(encoding="utf-8")
    tree = ast.parse(source)
    for node in ast.walk(tree):  # the plan builder (and callback events) named here read them by design
        if isinstance(node, ast.Module | ast.ClassDef):
            node.body = [n for n in node.body if getattr(n, "name", None) not in exempt]
    assert _argument_reads(tree) == []
