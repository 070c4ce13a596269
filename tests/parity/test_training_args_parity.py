"""Parity of `TrainingArguments` / `Seq2SeqTrainingArguments` with transformers 5.24 (the oracle).

transformers is always built with ``use_cpu=True`` and ``output_dir`` in ``tmp_path`` so that no
hardware-specific branch runs.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import pytest
import transformers

from hf_lightning.args.seq2seq import Seq2SeqTrainingArguments
from hf_lightning.args.training_args import TrainingArguments

# to_dict values that differ on purpose (the keys are always the same). None at present: even
# accelerator_config is serialised like transformers' AcceleratorConfig (its defaults filled in).
KNOWN_VALUE_DIFFERENCES: set[str] = set()

THEIR_FIELDS = dataclasses.fields(transformers.TrainingArguments)
OUR_FIELDS = {f.name: f for f in dataclasses.fields(TrainingArguments)}


def _default(f: dataclasses.Field):
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _build(cls, tmp_path, kwargs):
    """``cls(**kwargs)`` on CPU in tmp_path; the ValueError it raises, or the arguments."""
    kwargs = {"output_dir": str(tmp_path), "use_cpu": True, **kwargs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return cls(**kwargs)
        except ValueError as error:
            return error


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch):
    """transformers writes FSDP/accelerate variables to os.environ; undo that after each test."""
    for name in ("FSDP_CPU_RAM_EFFICIENT_LOADING", "ACCELERATE_DYNAMO_BACKEND", "ACCELERATE_DYNAMO_MODE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("their", THEIR_FIELDS, ids=lambda f: f.name)
def test_field_exists_with_same_default(their):
    """Every transformers field exists in ours, with the same default."""
    assert their.name in OUR_FIELDS, f"missing field {their.name}"
    assert _default(OUR_FIELDS[their.name]) == _default(their)


def test_fields_in_transformers_order():
    """Our fields come in transformers' order (the order HfArgumentParser shows them)."""
    assert [f.name for f in THEIR_FIELDS] == list(OUR_FIELDS)


@pytest.mark.parametrize("their", THEIR_FIELDS, ids=lambda f: f.name)
def test_argparse_metadata_matches(their):
    """`choices`, `nargs` and `const` given to argparse are the same; every field has help text."""
    ours = OUR_FIELDS[their.name].metadata
    assert ours["help"]
    assert ours.get("nargs") == their.metadata.get("nargs")
    assert ours.get("const") == their.metadata.get("const")
    assert list(ours.get("choices", [])) == list(their.metadata.get("choices", []))


# --- the combination table -----------------------------------------------------------------------------
CASES = {
    "defaults": {},
    "eval_steps_default_to_logging": {"eval_strategy": "steps"},
    "eval_steps_zero_falls_back": {"eval_strategy": "steps", "eval_steps": 0},
    "eval_ratio_from_logging_ratio": {"eval_strategy": "steps", "logging_steps": 0.1},
    "eval_epoch": {"eval_strategy": "epoch"},
    "eval_steps_float_integral": {"eval_strategy": "steps", "eval_steps": 100.0},
    "logging_steps_float_integral": {"logging_steps": 10.0},
    "logging_ratio": {"logging_steps": 0.05},
    "save_ratio": {"save_steps": 0.25},
    "save_steps_float_integral": {"save_steps": 20.0},
    "best_steps_multiple": {
        "load_best_model_at_end": True,
        "eval_strategy": "steps",
        "eval_steps": 100,
        "save_steps": 500,
    },
    "best_epoch": {"load_best_model_at_end": True, "eval_strategy": "epoch", "save_strategy": "epoch"},
    "best_with_save_best": {
        "load_best_model_at_end": True,
        "eval_strategy": "steps",
        "save_strategy": "best",
    },
    "best_ratio_multiple": {
        "load_best_model_at_end": True,
        "eval_strategy": "steps",
        "eval_steps": 0.1,
        "save_steps": 0.3,
    },
    "best_accuracy": {
        "load_best_model_at_end": True,
        "eval_strategy": "epoch",
        "save_strategy": "epoch",
        "metric_for_best_model": "accuracy",
    },
    "best_eval_loss": {
        "load_best_model_at_end": True,
        "eval_strategy": "epoch",
        "save_strategy": "epoch",
        "metric_for_best_model": "eval_loss",
    },
    "metric_without_best": {"metric_for_best_model": "f1"},
    "greater_is_better_given": {"metric_for_best_model": "accuracy", "greater_is_better": False},
    "save_best_with_metric": {
        "save_strategy": "best",
        "eval_strategy": "steps",
        "metric_for_best_model": "acc",
    },
    "plateau_with_eval": {"lr_scheduler_type": "reduce_lr_on_plateau", "eval_strategy": "epoch"},
    "greedy_with_eval": {"lr_scheduler_type": "greedy", "eval_strategy": "steps"},
    "cosine_warmup_ratio": {"lr_scheduler_type": "cosine", "warmup_steps": 0.1},
    "warmup_count": {"warmup_steps": 5},
    "warmup_ratio_rounds_up": {"warmup_steps": 0.015},
    "report_all": {"report_to": "all"},
    "report_one": {"report_to": "tensorboard"},
    "report_list": {"report_to": ["tensorboard", "wandb"]},
    "report_none_list": {"report_to": ["none"]},
    "compile_backend": {"torch_compile_backend": "eager"},
    "compile_mode": {"torch_compile_mode": "reduce-overhead"},
    "compile_flag": {"torch_compile": True},
    "old_checkpointing_name": {"gradient_checkpointing": True},
    "old_checkpointing_kwargs": {"gradient_checkpointing_kwargs": {"use_reentrant": False}},
    "new_name_wins": {"activation_checkpointing": True, "gradient_checkpointing": False},
    "json_kwargs": {"lr_scheduler_kwargs": '{"num_cycles": "2", "power": "0.5", "flag": "true", "s": "x"}'},
    "json_checkpoint_kwargs": {"activation_checkpointing_kwargs": '{"use_reentrant": "false"}'},
    "tokens_seen_bool": {"include_num_input_tokens_seen": True},
    "tokens_seen_non_padding": {"include_num_input_tokens_seen": "non_padding"},
    "debug_option": {"debug": "underflow_overflow"},
    "fsdp_legacy_words": {"fsdp": "full_shard auto_wrap"},
    "fsdp_offload": {"fsdp": "shard_grad_op offload"},
    "fsdp_config_prefix": {"fsdp": True, "fsdp_config": {"fsdp_transformer_layer_cls_to_wrap": "GPT2Block"}},
    "fsdp_v1_hybrid": {"fsdp": "hybrid_shard", "fsdp_config": {"version": 1}},
    "workers_prefetch": {"dataloader_num_workers": 2, "dataloader_prefetch_factor": 2},
    "workers_persistent": {"dataloader_num_workers": 1, "dataloader_persistent_workers": True},
    "optimizer_and_batch": {
        "optim": "sgd",
        "per_device_train_batch_size": 4,
        "per_device_eval_batch_size": 3,
    },
    "output_dir_default": {"output_dir": None},
    "bf16_on_cpu": {"bf16": True},
    "tf32_off": {"tf32": False},
    "hub_token_masked": {"hub_token": "secret", "hub_strategy": "checkpoint"},
    "do_eval_derived": {"eval_strategy": "epoch", "do_eval": False},
    # --- invalid: both raise ---
    "bad_eval_strategy": {"eval_strategy": "sometimes"},
    "bad_optim": {"optim": "adamw_magic"},
    "bad_scheduler": {"lr_scheduler_type": "zigzag"},
    "bad_save_strategy": {"save_strategy": "always"},
    "bad_hub_strategy": {"hub_strategy": "never"},
    "bad_logging_strategy": {"logging_strategy": "often"},
    "logging_steps_zero": {"logging_steps": 0},
    "logging_steps_fractional": {"logging_steps": 10.5},
    "eval_steps_fractional": {"eval_strategy": "steps", "eval_steps": 10.5},
    "save_steps_fractional": {"save_steps": 10.5},
    "eval_steps_without_any_steps": {"eval_strategy": "steps", "logging_steps": 0, "logging_strategy": "no"},
    "best_strategies_differ": {
        "load_best_model_at_end": True,
        "eval_strategy": "steps",
        "save_strategy": "epoch",
    },
    "best_without_eval": {"load_best_model_at_end": True},
    "best_not_multiple": {"load_best_model_at_end": True, "eval_strategy": "steps", "eval_steps": 300},
    "best_ratio_and_count": {
        "load_best_model_at_end": True,
        "eval_strategy": "steps",
        "eval_steps": 100,
        "save_steps": 0.5,
    },
    "best_ratio_not_multiple": {
        "load_best_model_at_end": True,
        "eval_strategy": "steps",
        "eval_steps": 0.1,
        "save_steps": 0.25,
    },
    "fp16_and_bf16": {"fp16": True, "bf16": True},
    "fp16_and_bf16_full_eval": {"fp16_full_eval": True, "bf16_full_eval": True},
    "plateau_without_eval": {"lr_scheduler_type": "reduce_lr_on_plateau"},
    "greedy_without_eval": {"lr_scheduler_type": "greedy"},
    "negative_warmup": {"warmup_steps": -1},
    "prefetch_without_workers": {"dataloader_prefetch_factor": 2},
    "empty_cache_zero": {"torch_empty_cache_steps": 0},
    "empty_cache_float": {"torch_empty_cache_steps": 2.5},
    "bad_debug": {"debug": "everything"},
    "fsdp_bad_word": {"fsdp": "shard_everything"},
    "fsdp_v2_hybrid": {"fsdp": "hybrid_shard"},
    "fsdp_bad_wrap_policy": {"fsdp": True, "fsdp_config": {"auto_wrap_policy": "WRAP_ALL"}},
    "accelerator_config_dict": {"accelerator_config": {"split_batches": True, "use_configured_state": False}},
    "accelerator_config_json": {"accelerator_config": '{"even_batches": "false"}'},
    "tf32_needs_ampere": {"tf32": True},  # raises in both without an Ampere GPU, passes in both with one
}

DERIVED = (
    "train_batch_size",
    "eval_batch_size",
    "world_size",
    "process_index",
    "local_process_index",
    "n_gpu",
    "device",
    "should_log",
    "should_save",
)


@pytest.mark.parametrize("kwargs", CASES.values(), ids=CASES.keys())
def test_same_outcome_as_transformers(kwargs, tmp_path):
    """Ours raises ValueError exactly where transformers does, and otherwise derives the same values."""
    ours = _build(TrainingArguments, tmp_path, kwargs)
    theirs = _build(transformers.TrainingArguments, tmp_path, kwargs)
    assert isinstance(ours, ValueError) == isinstance(theirs, ValueError), (ours, theirs)
    if isinstance(ours, ValueError):
        return
    our_dict, their_dict = ours.to_dict(), theirs.to_dict()
    assert our_dict.keys() == their_dict.keys()
    for key in our_dict.keys() - KNOWN_VALUE_DIFFERENCES:
        assert our_dict[key] == their_dict[key], key
    for name in DERIVED:
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.get_warmup_steps(100) == theirs.get_warmup_steps(100)
    assert ours.parallel_mode.value == theirs.parallel_mode.value
    assert ours.get_process_log_level() == theirs.get_process_log_level()


def test_table_is_large_enough():
    """The combination table holds at least 40 cases, valid and invalid."""
    assert len(CASES) >= 40


# Documented rules that transformers states but does not enforce when the arguments are built.
DOCUMENTED_RULES = {
    "save_best_needs_eval": {"save_strategy": "best", "metric_for_best_model": "loss"},
    "eval_on_start_needs_eval": {"eval_on_start": True},
    "persistent_workers_need_workers": {"dataloader_persistent_workers": True},
    "log_level_choices": {"log_level": "verbose"},
    "log_level_replica_choices": {"log_level_replica": "loud"},
    "tokens_seen_choices": {"include_num_input_tokens_seen": "some"},
    "sampling_choices": {"train_sampling_strategy": "shuffle"},
    "multiprocessing_context_choices": {"dataloader_multiprocessing_context": "thread"},
}


@pytest.mark.parametrize("kwargs", DOCUMENTED_RULES.values(), ids=DOCUMENTED_RULES.keys())
def test_documented_rule_enforced_where_transformers_is_silent(kwargs, tmp_path):
    """Divergence: the documented requirement raises in ours; transformers accepts and ignores it."""
    assert not isinstance(_build(transformers.TrainingArguments, tmp_path, kwargs), ValueError)
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        TrainingArguments(output_dir=str(tmp_path), use_cpu=True, **kwargs)


def test_report_to_none_means_no_integration(tmp_path):
    """Divergence: report_to=None gives [] (transformers 5.24 stores [None])."""
    assert _build(transformers.TrainingArguments, tmp_path, {"report_to": None}).report_to == [None]
    assert TrainingArguments(output_dir=str(tmp_path), report_to=None).report_to == []


SETTER_CALLS = {
    "set_training": {
        "learning_rate": 1e-4,
        "batch_size": 32,
        "num_epochs": 2,
        "activation_checkpointing": True,
    },
    "set_training_defaults": {},
    "set_evaluate": {"strategy": "steps", "steps": 100, "batch_size": 4, "delay": 2.0, "loss_only": True},
    "set_evaluate_defaults": {},
    "set_testing": {"batch_size": 32, "loss_only": True},
    "set_save": {"strategy": "epoch", "total_limit": 2, "on_each_node": True},
    "set_logging": {"strategy": "epoch", "report_to": "tensorboard", "level": "info", "first_step": True},
    "set_logging_defaults": {},
    "set_push_to_hub": {"model_id": "me/model", "strategy": "end", "token": "t", "private_repo": True},
    "set_optimizer": {"name": "sgd", "learning_rate": 0.1, "beta1": 0.8, "args": "momentum=0.9"},
    "set_optimizer_defaults": {},
    "set_lr_scheduler": {"name": "cosine", "num_epochs": 5, "max_steps": 10, "warmup_steps": 0.05},
    "set_dataloader": {"train_batch_size": 16, "eval_batch_size": 64, "num_workers": 2, "sampler_seed": 3},
}


@pytest.mark.parametrize("call", SETTER_CALLS.items(), ids=SETTER_CALLS.keys())
def test_setter_matches_transformers(call, tmp_path):
    """Each set_* helper leaves the same to_dict() as transformers' helper with the same arguments."""
    name, kwargs = call
    method = name.removesuffix("_defaults")
    ours = TrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    theirs = _build(transformers.TrainingArguments, tmp_path, {})
    assert getattr(ours, method)(**kwargs) is ours
    getattr(theirs, method)(**kwargs)
    our_dict, their_dict = ours.to_dict(), theirs.to_dict()
    for key in our_dict.keys() - KNOWN_VALUE_DIFFERENCES:
        assert our_dict[key] == their_dict[key], key


@pytest.mark.parametrize("method", ["set_evaluate", "set_save", "set_logging"])
def test_setter_steps_zero_raises_like_transformers(method, tmp_path):
    """strategy='steps' with steps=0 raises ValueError in both."""
    theirs = _build(transformers.TrainingArguments, tmp_path, {})
    with pytest.raises(ValueError):
        getattr(theirs, method)(strategy="steps", steps=0)
    with pytest.raises(ValueError, match="steps"):
        getattr(TrainingArguments(output_dir=str(tmp_path)), method)(strategy="steps", steps=0)


@pytest.mark.parametrize("warmup", [0, 0.1, 0.015, 0.5, 1, 7, 7.0])
@pytest.mark.parametrize("total", [1, 33, 100])
def test_warmup_steps_match(warmup, total, tmp_path):
    """get_warmup_steps agrees with transformers for counts and ratios."""
    ours = TrainingArguments(output_dir=str(tmp_path), warmup_steps=warmup)
    theirs = _build(transformers.TrainingArguments, tmp_path, {"warmup_steps": warmup})
    assert ours.get_warmup_steps(total) == theirs.get_warmup_steps(total)
    assert ours.get_warmup_steps(total) == (int(warmup) if warmup >= 1 else math.ceil(total * warmup))


def test_seq2seq_defaults_match():
    """Seq2SeqTrainingArguments has transformers' fields, in order, with the same defaults."""
    theirs = dataclasses.fields(transformers.Seq2SeqTrainingArguments)
    ours = dataclasses.fields(Seq2SeqTrainingArguments)
    assert [f.name for f in ours] == [f.name for f in theirs]
    assert [_default(f) for f in ours] == [_default(f) for f in theirs]


def test_seq2seq_to_dict_serialises_generation_config(tmp_path):
    """A GenerationConfig object becomes the same dict in both to_dict() outputs."""
    config = transformers.GenerationConfig(max_new_tokens=7, num_beams=2)
    ours = Seq2SeqTrainingArguments(output_dir=str(tmp_path), use_cpu=True, generation_config=config)
    theirs = _build(transformers.Seq2SeqTrainingArguments, tmp_path, {"generation_config": config})
    assert ours.to_dict()["generation_config"] == theirs.to_dict()["generation_config"]


def test_json_string_loads_in_transformers(tmp_path):
    """A to_json_string() of ours parses into the same keys transformers writes."""
    import json

    ours = json.loads(TrainingArguments(output_dir=str(tmp_path)).to_json_string())
    theirs = json.loads(_build(transformers.TrainingArguments, tmp_path, {}).to_json_string())
    assert ours.keys() == theirs.keys()


def test_accepts_transformers_enums(tmp_path):
    """transformers' own enum members are accepted wherever a strategy name is."""
    from transformers.trainer_utils import IntervalStrategy, SchedulerType

    args = TrainingArguments(
        output_dir=str(tmp_path), eval_strategy=IntervalStrategy.STEPS, lr_scheduler_type=SchedulerType.COSINE
    )
    assert (args.eval_strategy, args.lr_scheduler_type) == ("steps", "cosine")


def test_rebuilds_from_transformers_to_dict(tmp_path):
    """TrainingArguments(**transformers_args.to_dict()) works and keeps every value."""
    theirs = _build(
        transformers.TrainingArguments, tmp_path, {"eval_strategy": "steps", "fsdp": "full_shard"}
    )
    ours = TrainingArguments(**theirs.to_dict())
    assert ours.to_dict() == theirs.to_dict()


def test_gradient_checkpointing_deprecation_warning_is_transformers(recwarn):
    """The FutureWarning for the deprecated ``gradient_checkpointing`` alias has transformers' words (TRL's
    configurations set it, so every TRL run shows it)."""
    import warnings

    import transformers

    import hf_lightning

    messages = []
    for lib in (transformers, hf_lightning):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lib.TrainingArguments(output_dir="unused", gradient_checkpointing=True)
        messages.append([str(w.message) for w in caught if issubclass(w.category, FutureWarning)])
    assert messages[1] == messages[0] and messages[0]


@pytest.mark.parametrize("configured", [False, True])
def test_str_shows_accelerator_config_as_transformers(tmp_path, configured):
    """str(args) shows accelerator_config with use_configured_state last and False (consumed when the
    arguments are built), as transformers' dataclass does; to_dict() leaves it out on both."""
    import transformers
    from accelerate.state import PartialState

    PartialState(cpu=True)  # use_configured_state=True needs a state set up before
    config = {"use_configured_state": configured} if configured else None
    lines = [
        [line for line in str(cls(output_dir=str(tmp_path), use_cpu=True, accelerator_config=config)).splitlines()
         if line.startswith("accelerator_config=")]
        for cls in (transformers.TrainingArguments, TrainingArguments)
    ]  # fmt: skip
    assert lines[1] == lines[0] and "'use_configured_state': False}" in lines[1][0]


@pytest.mark.parametrize("kwargs", [{"torch_compile": True}, {"torch_compile_mode": "default"}, {}])
def test_torch_compile_logs_transformers_tf32_lines(kwargs, tmp_path, caplog):
    """``torch_compile`` without an Ampere GPU: transformers' warning that compiling gains little, once per
    build, in both; nothing without torch_compile."""
    import logging

    lines = {}
    for name, cls in (("theirs", transformers.TrainingArguments), ("ours", TrainingArguments)):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            cls(str(tmp_path / name), report_to="none", use_cpu=True, **kwargs)
        lines[name] = [
            r.getMessage()
            for r in caplog.records
            if "torchdynamo" in r.getMessage() or "TF32" in r.getMessage()
        ]
    assert lines["ours"] == lines["theirs"]
    assert len(lines["ours"]) == (1 if kwargs else 0)
