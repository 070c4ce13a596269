"""Unit tests of `TrainingArguments`: normalisation, the rule table, runtime properties, helpers, serialisation."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
import subprocess
import sys

import pytest
import torch

from hf_lightning.args.enums import (
    DebugOption,
    HubStrategy,
    IntervalStrategy,
    OptimizerNames,
    ParallelMode,
    SaveStrategy,
    SchedulerType,
)
from hf_lightning.args.seq2seq import Seq2SeqTrainingArguments
from hf_lightning.args.training_args import TrainingArguments, resolve_steps


@pytest.fixture
def make(tmp_path):
    """Build TrainingArguments in tmp_path."""

    def build(**kwargs):
        return TrainingArguments(output_dir=str(tmp_path), **kwargs)

    return build


@pytest.fixture
def no_launcher_env(monkeypatch):
    """Run as a single process, whatever launched pytest."""
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)


# --- enums and normalisation -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "value", "enum"),
    [
        ("eval_strategy", "steps", IntervalStrategy),
        ("logging_strategy", "epoch", IntervalStrategy),
        ("save_strategy", "best", SaveStrategy),
        ("hub_strategy", "end", HubStrategy),
        ("lr_scheduler_type", "cosine", SchedulerType),
        ("optim", "sgd", OptimizerNames),
    ],
)
def test_strings_become_enums_equal_to_the_string(make, name, value, enum):
    """Strategy strings become str enums that still compare equal to the string."""
    extra = {"eval_strategy": "steps"} if value == "best" else {}
    args = make(**{name: value, **extra})
    assert isinstance(getattr(args, name), enum)
    assert getattr(args, name) == value


def test_enum_lookup_lists_allowed_values():
    """An unknown enum value raises ValueError listing every allowed value."""
    with pytest.raises(ValueError, match="no, steps, epoch, best"):
        SaveStrategy("sometimes")


def test_output_dir_defaults_to_trainer_output():
    """output_dir=None becomes 'trainer_output'."""
    assert TrainingArguments().output_dir == "trainer_output"


def test_output_dir_expands_user(monkeypatch, tmp_path):
    """A leading ~ in output_dir is expanded."""
    monkeypatch.setenv("HOME", str(tmp_path))
    assert TrainingArguments(output_dir="~/run").output_dir == str(tmp_path / "run")


@pytest.mark.parametrize(
    ("given", "expected"),
    [("none", []), (["none"], []), (None, []), ("wandb", ["wandb"]), (["a", "b"], ["a", "b"])],
)
def test_report_to_becomes_list(make, given, expected):
    """report_to is always a list: 'none' and None are empty, a single name is wrapped."""
    assert make(report_to=given).report_to == expected


def test_report_to_all_lists_installed_integrations(make):
    """report_to='all' lists the installed integrations (tensorboard is a test dependency)."""
    assert "tensorboard" in make(report_to="all").report_to


@pytest.mark.parametrize(
    ("kwargs", "eval_steps"),
    [
        ({"eval_strategy": "steps"}, 500),
        ({"eval_strategy": "steps", "logging_steps": 7}, 7),
        ({"eval_strategy": "steps", "logging_steps": 0.1}, 0.1),
        ({"eval_strategy": "steps", "eval_steps": 3}, 3),
        ({"eval_strategy": "epoch"}, None),
    ],
)
def test_eval_steps_defaults_to_logging_steps(make, kwargs, eval_steps):
    """With eval_strategy='steps' and no eval_steps, eval_steps takes logging_steps."""
    assert make(**kwargs).eval_steps == eval_steps


@pytest.mark.parametrize(
    ("kwargs", "metric", "greater"),
    [
        ({}, None, None),
        ({"load_best_model_at_end": True, "eval_strategy": "epoch", "save_strategy": "epoch"}, "loss", False),
        ({"metric_for_best_model": "accuracy"}, "accuracy", True),
        ({"metric_for_best_model": "eval_loss"}, "eval_loss", False),
        ({"metric_for_best_model": "accuracy", "greater_is_better": False}, "accuracy", False),
        ({"lr_scheduler_type": "reduce_lr_on_plateau", "eval_strategy": "epoch"}, "loss", False),
    ],
)
def test_best_metric_defaults(make, kwargs, metric, greater):
    """metric_for_best_model defaults to 'loss' when needed; greater_is_better follows the name."""
    args = make(**kwargs)
    assert (args.metric_for_best_model, args.greater_is_better) == (metric, greater)


@pytest.mark.parametrize(
    ("kwargs", "backend"),
    [({}, None), ({"torch_compile": True}, "inductor"), ({"torch_compile_mode": "max-autotune"}, "inductor")],
)
def test_compile_settings(make, kwargs, backend):
    """A compile mode or backend turns torch_compile on; the backend defaults to inductor."""
    args = make(**kwargs)
    assert args.torch_compile == (backend is not None)
    assert args.torch_compile_backend == backend


def test_compile_backend_given_turns_compile_on(make):
    """torch_compile_backend alone switches torch_compile on and is kept."""
    args = make(torch_compile_backend="eager")
    assert (args.torch_compile, args.torch_compile_backend) == (True, "eager")


def test_gradient_checkpointing_is_a_deprecated_alias(make):
    """gradient_checkpointing=True warns and sets activation_checkpointing; both names then agree."""
    with pytest.warns(FutureWarning, match="activation_checkpointing"):
        args = make(gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False})
    assert args.activation_checkpointing is args.gradient_checkpointing is True
    assert (
        args.activation_checkpointing_kwargs == args.gradient_checkpointing_kwargs == {"use_reentrant": False}
    )


def test_activation_checkpointing_defaults_to_false(make):
    """Neither name given: both are False."""
    args = make()
    assert args.activation_checkpointing is False and args.gradient_checkpointing is False


def test_replace_takes_new_checkpointing_name(make):
    """dataclasses.replace with the new name wins over the mirrored old one."""
    assert dataclasses.replace(make(), activation_checkpointing=True).gradient_checkpointing is True


def test_json_string_dicts_are_parsed(make):
    """*_kwargs / *_config given as JSON text become dicts with bools and numbers converted."""
    args = make(lr_scheduler_kwargs='{"num_cycles": "2", "power": "0.5", "flag": "true", "name": "x"}')
    assert args.lr_scheduler_kwargs == {"num_cycles": 2, "power": 0.5, "flag": True, "name": "x"}


def test_accelerator_config_read_from_json_file(make, tmp_path):
    """accelerator_config given as a JSON file path is read into a dict."""
    path = tmp_path / "acc.json"
    path.write_text('{"split_batches": true}')
    config = make(accelerator_config=str(path)).accelerator_config
    assert config["split_batches"] is True and config["even_batches"] is True


def test_accelerator_config_unknown_key_raises(make):
    """An unknown accelerator_config key raises ValueError listing the allowed keys."""
    with pytest.raises(ValueError, match="unknown keys \\['splitt'\\].*split_batches"):
        make(accelerator_config={"splitt": True})


def test_use_configured_state_needs_a_state_set_up_first(make, tmp_path, monkeypatch):
    """use_configured_state=True without a configured state raises as transformers does; with a started
    process group, or after earlier arguments of the process, it is accepted and consumed."""
    import torch.distributed as dist
    from accelerate.state import PartialState

    from hf_lightning.args import normalize

    monkeypatch.setattr(PartialState, "_shared_state", {})  # other tests' transformers arguments set it up
    monkeypatch.setattr(normalize._DEVICES, "set_up", False)  # and other tests' arguments here
    with pytest.raises(ValueError, match="use_configured_state.*PartialState.*torch.distributed"):
        make(accelerator_config={"use_configured_state": True})
    make()  # arguments set up the devices: later ones may reuse them (sentence-transformers' defaults do)
    assert make(accelerator_config={"use_configured_state": True}).accelerator_config.split_batches is False
    monkeypatch.setattr(normalize._DEVICES, "set_up", False)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        config = make(accelerator_config={"use_configured_state": True}).accelerator_config
    finally:
        dist.destroy_process_group()
    assert "use_configured_state" not in config and config["split_batches"] is False


@pytest.mark.parametrize(
    ("given", "expected"), [(True, "all"), (False, "no"), ("non_padding", "non_padding")]
)
def test_include_num_input_tokens_seen(make, given, expected):
    """Booleans map to 'all'/'no'; strings are kept."""
    assert make(include_num_input_tokens_seen=given).include_num_input_tokens_seen == expected


def test_debug_string_becomes_option_list(make):
    """debug='underflow_overflow' becomes [DebugOption.UNDERFLOW_OVERFLOW]; '' becomes []."""
    assert make(debug="underflow_overflow").debug == [DebugOption.UNDERFLOW_OVERFLOW]
    assert make().debug == []


@pytest.mark.parametrize(("name", "value"), [("logging_steps", 10.0), ("save_steps", 20.0)])
def test_whole_float_steps_become_int(make, name, value):
    """A whole-number float above 1 becomes an int."""
    got = getattr(make(**{name: value}), name)
    assert got == int(value) and isinstance(got, int)


def test_ratio_steps_are_kept(make):
    """Float steps below 1 stay ratios, resolved later against the total steps."""
    args = make(logging_steps=0.1, save_steps=0.25)
    assert (args.logging_steps, args.save_steps) == (0.1, 0.25)


def test_use_cpu_disables_pin_memory(make):
    """use_cpu=True turns dataloader_pin_memory off."""
    assert make(use_cpu=True).dataloader_pin_memory is False
    assert make().dataloader_pin_memory is True


def test_eval_strategy_sets_do_eval(make):
    """An eval strategy other than 'no' sets do_eval."""
    assert make(eval_strategy="epoch").do_eval is True


def test_legacy_fsdp_string_folds_into_config(make):
    """fsdp='full_shard offload' becomes fsdp=True with the matching fsdp_config entries."""
    args = make(fsdp="full_shard offload", fsdp_config={"fsdp_min_num_params": 10})
    assert args.fsdp is True
    assert args.fsdp_config["reshard_after_forward"] is True
    assert args.fsdp_config["cpu_offload"] is True
    assert args.fsdp_config["min_num_params"] == 10


# --- the rule table --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"optim": "magic"}, ["optim='magic'", "adamw_torch_fused"]),
        ({"eval_strategy": "x"}, ["eval_strategy='x'", "no, steps, epoch"]),
        (
            {"load_best_model_at_end": True, "eval_strategy": "steps", "save_strategy": "epoch"},
            ["'steps' and 'epoch'"],
        ),
        (
            {"load_best_model_at_end": True, "eval_strategy": "steps", "eval_steps": 300},
            ["save_steps", "eval_steps"],
        ),
        ({"save_strategy": "best"}, ["save_strategy='best'", "eval_strategy"]),
        ({"eval_on_start": True}, ["eval_on_start=True", "eval_strategy"]),
        (
            {"dataloader_persistent_workers": True},
            ["dataloader_persistent_workers", "dataloader_num_workers"],
        ),
        ({"dataloader_prefetch_factor": 2}, ["dataloader_prefetch_factor", "dataloader_num_workers"]),
        ({"fp16": True, "bf16": True}, ["fp16", "bf16"]),
        ({"logging_steps": 2.5}, ["logging_steps=2.5", "whole number"]),
        ({"eval_strategy": "steps", "eval_steps": 0, "logging_steps": 0}, ["eval_steps", "logging_steps"]),
        ({"log_level": "loud"}, ["log_level='loud'", "'passive'"]),
        ({"train_sampling_strategy": "shuffle"}, ["train_sampling_strategy", "'group_by_length'"]),
        ({"warmup_steps": -0.5}, ["warmup_steps=-0.5", ">= 0"]),
    ],
)
def test_error_names_argument_and_allowed_values(make, kwargs, names):
    """Each violated rule's message names the argument and what is allowed."""
    with pytest.raises(ValueError) as info:
        make(**kwargs)
    for text in names:
        assert text in str(info.value)


def test_all_violations_reported_in_one_error(make):
    """Several violated rules are listed together in one ValueError."""
    with pytest.raises(ValueError) as info:
        make(optim="magic", fp16=True, bf16=True, warmup_steps=-1, eval_on_start=True)
    message = str(info.value)
    assert message.startswith("4 problems with `TrainingArguments`")
    assert all(word in message for word in ("optim=", "fp16", "warmup_steps", "eval_on_start"))


def test_error_uses_subclass_name(tmp_path):
    """Messages quote the class the user called."""
    with pytest.raises(ValueError, match=r"`Seq2SeqTrainingArguments\(fp16=True"):
        Seq2SeqTrainingArguments(output_dir=str(tmp_path), fp16=True, bf16=True)


def test_save_best_with_eval_is_valid(make):
    """save_strategy='best' with an eval strategy is accepted."""
    assert make(save_strategy="best", eval_strategy="epoch").save_strategy == SaveStrategy.BEST


# --- runtime properties ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "total", "steps"), [(500, 10, 500), (0.1, 95, 10), (0.5, 3, 2), (1, 7, 1)])
def test_resolve_steps(value, total, steps):
    """resolve_steps: counts stay, ratios are ceil(total * ratio)."""
    assert resolve_steps(value, total) == steps


@pytest.mark.parametrize(("warmup", "steps"), [(0, 0), (0.1, 10), (0.015, 2), (5, 5), (5.0, 5)])
def test_get_warmup_steps(make, warmup, steps):
    """get_warmup_steps(100): counts stay, ratios round up."""
    assert make(warmup_steps=warmup).get_warmup_steps(100) == steps


def test_ranks_read_from_environment(make, monkeypatch):
    """world_size, process_index and local_process_index come from WORLD_SIZE, RANK, LOCAL_RANK."""
    args = make(use_cpu=True)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert (args.world_size, args.process_index, args.local_process_index) == (4, 3, 1)
    assert args.parallel_mode == ParallelMode.DISTRIBUTED


def test_single_process_defaults(make, no_launcher_env):
    """Without launcher variables: one process of rank 0, not parallel on CPU."""
    args = make(use_cpu=True)
    assert (args.world_size, args.process_index, args.local_process_index) == (1, 0, 0)
    assert args.parallel_mode == ParallelMode.NOT_PARALLEL
    assert args.should_log and args.should_save


@pytest.mark.parametrize(
    ("rank", "local", "on_each_node", "expected"),
    [("0", "0", False, True), ("2", "0", False, False), ("2", "0", True, True), ("1", "1", True, False)],
)
def test_should_log_and_save(make, monkeypatch, rank, local, on_each_node, expected):
    """Global rank 0 logs and saves; with *_on_each_node, every local rank 0 does."""
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("LOCAL_RANK", local)
    args = make(log_on_each_node=on_each_node, save_on_each_node=on_each_node)
    assert args.should_log is expected and args.should_save is expected


def test_use_cpu_device_and_batch_sizes(make):
    """use_cpu: device cpu, no GPU, batch sizes equal the per-device ones."""
    args = make(use_cpu=True, per_device_train_batch_size=4, per_device_eval_batch_size=6)
    assert args.device == torch.device("cpu") and args.n_gpu == 0
    assert (args.train_batch_size, args.eval_batch_size) == (4, 6)


def test_device_without_cuda_is_cpu(make, monkeypatch):
    """Without CUDA the device is the CPU even when use_cpu is False."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert make().device == torch.device("cpu")


def test_device_with_cuda_follows_local_rank(make, monkeypatch):
    """With CUDA the device is cuda:<LOCAL_RANK> and each process drives one GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    args = make()
    assert args.device == torch.device("cuda", 1) and args.n_gpu == 1


@pytest.mark.parametrize(("level", "expected"), [("info", 20), ("error", 40), ("detail", 10)])
def test_process_log_level_main(make, no_launcher_env, level, expected):
    """The logging process uses log_level."""
    assert make(log_level=level).get_process_log_level() == expected


def test_process_log_level_replica(make, monkeypatch):
    """A non-logging process uses log_level_replica."""
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert make(log_level="info", log_level_replica="error").get_process_log_level() == 40


def test_passive_log_level_keeps_logger_level(make, no_launcher_env):
    """'passive' returns the level the application set on the hf_lightning logger."""
    import logging

    logger = logging.getLogger("hf_lightning")
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        assert make().get_process_log_level() == logging.ERROR
    finally:
        logger.setLevel(old)


def test_main_process_first_on_one_process(make):
    """On one process the block simply runs (no process group; tests/args/test_main_process_first_ddp.py
    shows the wait under a launcher)."""
    ran = []
    with make().main_process_first(local=False, desc="tokenize"):
        ran.append(True)
    assert ran == [True]


# --- set_* helpers ---------------------------------------------------------------------------------------
def test_setters_chain(make):
    """Every set_* helper returns the same object, so calls chain."""
    args = make()
    out = (
        args.set_training(learning_rate=1e-3, batch_size=4)
        .set_evaluate(strategy="steps", steps=10)
        .set_testing(batch_size=2)
        .set_save(strategy="epoch", total_limit=1)
        .set_logging(strategy="steps", steps=5)
        .set_push_to_hub("me/model", token="secret")
        .set_optimizer(name="sgd", beta1=0.5)
        .set_lr_scheduler(name="cosine", warmup_steps=0.1)
        .set_dataloader(train_batch_size=8, num_workers=1)
    )
    assert out is args
    assert (args.per_device_train_batch_size, args.eval_steps, args.save_total_limit) == (8, 10, 1)
    assert (args.logging_steps, args.adam_beta1, args.warmup_steps) == (5, 0.5, 0.1)
    assert (args.optim, args.lr_scheduler_type, args.hub_model_id) == ("sgd", "cosine", "me/model")
    assert args.do_train and args.do_eval and args.do_predict and args.push_to_hub


def test_set_training_old_checkpointing_name_warns(make):
    """set_training(gradient_checkpointing=True) warns and sets both names."""
    with pytest.warns(FutureWarning):
        args = make().set_training(gradient_checkpointing=True)
    assert args.activation_checkpointing is args.gradient_checkpointing is True


@pytest.mark.parametrize(
    ("method", "kwargs"),
    [
        ("set_evaluate", {"strategy": "often"}),
        ("set_save", {"strategy": "always"}),
        ("set_logging", {"strategy": "x"}),
        ("set_push_to_hub", {"model_id": "m", "strategy": "x"}),
        ("set_optimizer", {"name": "magic"}),
        ("set_lr_scheduler", {"name": "zigzag"}),
    ],
)
def test_setter_rejects_unknown_names(make, method, kwargs):
    """An unknown strategy/name raises ValueError naming the helper and parameter."""
    with pytest.raises(ValueError, match=rf"TrainingArguments\.{method}\(.*choose one of"):
        getattr(make(), method)(**kwargs)


# --- serialisation ---------------------------------------------------------------------------------------
def test_to_dict_plain_values_and_masked_token(make):
    """to_dict turns enums into strings and masks every *_token field."""
    d = make(hub_token="secret", eval_strategy="epoch", debug="underflow_overflow").to_dict()
    assert d["hub_token"] == "<HUB_TOKEN>"
    assert d["eval_strategy"] == "epoch" and type(d["eval_strategy"]) is str
    assert d["debug"] == ["underflow_overflow"]


def test_str_masks_token(make):
    """str()/repr() never show the token."""
    args = make(hub_token="secret")
    assert "secret" not in str(args) and "secret" not in repr(args)
    assert "hub_token=<HUB_TOKEN>" in str(args)


def test_to_dict_dtype_becomes_name(make):
    """A torch.dtype under a 'dtype' key of a dict field is written as its name."""
    d = make(lr_scheduler_kwargs={"inner": {"dtype": torch.bfloat16}}).to_dict()
    assert d["lr_scheduler_kwargs"] == {"inner": {"dtype": "bfloat16"}}


def test_to_json_string_round_trip(make):
    """TrainingArguments(**json.loads(args.to_json_string())) gives the same to_dict."""
    args = make(eval_strategy="steps", report_to="tensorboard", fsdp="full_shard", warmup_steps=0.1)
    again = TrainingArguments(**json.loads(args.to_json_string()))
    assert again.to_dict() == args.to_dict()


def test_to_sanitized_dict(make):
    """to_sanitized_dict adds the batch sizes and keeps only scalar types, the rest as str."""
    d = make(use_cpu=True, report_to="tensorboard").to_sanitized_dict()
    assert d["train_batch_size"] == 8 and d["eval_batch_size"] == 8
    assert d["report_to"] == "['tensorboard']"
    assert all(type(v) in (bool, int, float, str) for v in d.values())


def test_pickle_and_deepcopy(make):
    """Arguments survive pickle and deepcopy (needed by hyperparameter-search workers)."""
    args = make(eval_strategy="steps", optim="sgd")
    assert pickle.loads(pickle.dumps(args)).to_dict() == args.to_dict()
    assert copy.deepcopy(args).to_dict() == args.to_dict()


def test_training_arguments_is_one_flat_dataclass():
    """TrainingArguments has no base class but object: its methods are bound by name in the class body."""
    assert TrainingArguments.__bases__ == (object,)
    assert dataclasses.is_dataclass(TrainingArguments)


def test_subclass_overrides_a_bound_property():
    """A subclass may override a derived property, as with transformers' TrainingArguments."""

    @dataclasses.dataclass
    class OnEightGpus(TrainingArguments):
        @property
        def n_gpu(self) -> int:
            return 8

    assert OnEightGpus(output_dir="out", per_device_train_batch_size=2).train_batch_size == 16


def test_every_field_has_help():
    """Each field carries help text for the argument parser."""
    assert all(f.metadata.get("help") for f in dataclasses.fields(Seq2SeqTrainingArguments))


def test_parses_with_hf_argument_parser(tmp_path):
    """Our HfArgumentParser builds TrainingArguments from a command line."""
    from hf_lightning.args.parser import HfArgumentParser

    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--eval_strategy", "steps", "--lr_scheduler_kwargs", '{"a": "1"}']
    )
    assert args.eval_strategy == IntervalStrategy.STEPS and args.eval_steps == 500
    assert args.lr_scheduler_kwargs == {"a": 1}


# --- Seq2Seq ---------------------------------------------------------------------------------------------
def test_seq2seq_fields(tmp_path):
    """Seq2SeqTrainingArguments adds the generation settings with their defaults."""
    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path))
    assert (args.sortish_sampler, args.predict_with_generate) == (False, False)
    assert (args.generation_max_length, args.generation_num_beams, args.generation_config) == (
        None,
        None,
        None,
    )


def test_seq2seq_to_dict_uses_config_to_dict(tmp_path):
    """A generation config object is serialised through its to_dict()."""

    class Config:
        def to_dict(self):
            return {"num_beams": 3}

    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), generation_config=Config())
    assert args.to_dict()["generation_config"] == {"num_beams": 3}
    json.loads(args.to_json_string())


# --- architecture ----------------------------------------------------------------------------------------
def test_building_arguments_imports_no_engine():
    """Building and serialising the arguments loads no transformers, accelerate, lightning, or even torch."""
    code = (
        "import sys, hf_lightning.args.seq2seq as m; "
        "m.Seq2SeqTrainingArguments(report_to='all', eval_strategy='steps').to_json_string(); "
        "print(sorted(n for n in ('transformers', 'accelerate', 'lightning', 'torch') if n in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_bf16_accepted_without_use_cpu(make, monkeypatch):
    """Divergence: bf16 without a bf16 GPU is accepted (bf16 autocast runs on CPU); transformers raises."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert make(bf16=True).bf16 is True


def test_accelerator_config_takes_the_dataclass_and_reads_like_it(make):
    """As transformers: an AcceleratorConfig instance is accepted, the value reads by attribute and to_dict();
    the class itself (not an instance) is refused with NotImplementedError."""
    from transformers.trainer_pt_utils import AcceleratorConfig

    config = make(accelerator_config=AcceleratorConfig(even_batches=False)).accelerator_config
    assert config.even_batches is False and config["split_batches"] is False
    assert config.to_dict() == dict(config) and "use_configured_state" not in config
    assert make(accelerator_config={"split_batches": True}).accelerator_config.split_batches is True
    with pytest.raises(
        NotImplementedError,
        match="Tried passing in a callable to `accelerator_config`.*accelerator_config=AcceleratorConfig",
    ):
        make(accelerator_config=AcceleratorConfig)


def test_parallel_mode_members_equal_transformers_members_of_the_same_value():
    """transformers' code compares ``args.parallel_mode`` with its own members (``nested_gather``)."""
    theirs = pytest.importorskip("transformers.training_args").ParallelMode
    assert ParallelMode.DISTRIBUTED == theirs.DISTRIBUTED and theirs.DISTRIBUTED == ParallelMode.DISTRIBUTED
    assert ParallelMode.NOT_PARALLEL != theirs.DISTRIBUTED
    assert hash(ParallelMode.DISTRIBUTED) == hash(theirs.DISTRIBUTED)
