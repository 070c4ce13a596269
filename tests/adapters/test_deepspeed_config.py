"""DeepSpeed ``"auto"`` values are filled exactly as transformers' ``HfTrainerDeepSpeedConfig`` fills them.

transformers' class needs the ``deepspeed`` package to be constructed; its two filling methods do not,
so the oracle runs them on an instance built with Accelerate's base initialiser only.
"""

from __future__ import annotations

import copy

import pytest
import transformers
from accelerate.utils.deepspeed import HfDeepSpeedConfig as AccelerateConfig
from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

from hf_lightning import TrainingArguments
from hf_lightning.adapters.deepspeed import fill_deepspeed_config, zero_stage
from tests.tiny import tiny_gpt2

STEPS = 40
OPTIMIZER = {"type": "AdamW", "params": {k: "auto" for k in ("lr", "betas", "eps", "weight_decay")}}
SCHEDULER = {
    "type": "WarmupDecayLR",
    "params": {k: "auto" for k in ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps")},
}
AUTO_BATCH = {
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "train_batch_size": "auto",
}

CONFIGS = {
    "zero0_auto_batch": {**AUTO_BATCH, "gradient_clipping": "auto", "zero_optimization": {"stage": 0}},
    "zero1_optimizer": {**AUTO_BATCH, "optimizer": OPTIMIZER, "zero_optimization": {"stage": 1}},
    "zero2_scheduler_fp16": {
        **AUTO_BATCH,
        "optimizer": OPTIMIZER,
        "scheduler": SCHEDULER,
        "fp16": {"enabled": "auto"},
        "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"},
    },
    "zero2_offload_bf16": {
        **AUTO_BATCH,
        "bf16": {"enabled": "auto"},
        "zero_optimization": {
            "stage": 2,
            "offload_optimizer": {"device": "cpu"},
            "reduce_bucket_size": "auto",
        },
    },
    "zero3_hidden_size_keys": {
        **AUTO_BATCH,
        "scheduler": SCHEDULER,
        "zero_optimization": {
            "stage": 3,
            "reduce_bucket_size": "auto",
            "stage3_prefetch_bucket_size": "auto",
            "stage3_param_persistence_threshold": "auto",
        },
    },
    "zero3_offload_fixed_values": {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 2,
        "gradient_clipping": 0.5,
        "zero_optimization": {
            "stage": 3,
            "offload_param": {"device": "cpu"},
            "offload_optimizer": {"device": "cpu"},
        },
    },
}
ARGUMENTS = {
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 2,
    "max_grad_norm": 0.5,
    "learning_rate": 3e-4,
    "adam_beta1": 0.85,
    "adam_epsilon": 1e-7,
    "weight_decay": 0.01,
    "warmup_steps": 0.1,
    "use_cpu": True,
    "report_to": "none",
}
PRECISION = {"zero2_offload_bf16": {"bf16": True}}


class _Oracle(AccelerateConfig):
    """Accelerate's config object with transformers' filling methods (no ``deepspeed`` needed)."""

    is_auto = HfTrainerDeepSpeedConfig.is_auto
    fill_match = HfTrainerDeepSpeedConfig.fill_match
    fill_only = HfTrainerDeepSpeedConfig.fill_only
    trainer_config_process = HfTrainerDeepSpeedConfig.trainer_config_process
    trainer_config_finalize = HfTrainerDeepSpeedConfig.trainer_config_finalize


def transformers_filled(config: dict, tmp_path, extra: dict) -> dict:
    """The configuration transformers' Trainer would hand to DeepSpeed for ``config`` and ARGUMENTS."""
    args = transformers.TrainingArguments(str(tmp_path), **ARGUMENTS, **extra)
    oracle = _Oracle(copy.deepcopy(config))
    oracle._dtype, oracle.mismatches = None, []
    oracle.trainer_config_process(args)
    oracle.trainer_config_finalize(args, tiny_gpt2(), STEPS)
    return oracle.config


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_auto_values_filled_as_transformers_fills_them(name: str, tmp_path) -> None:
    """Each config (ZeRO 0–3, offload, scheduler, precision) is filled to transformers' very dict."""
    extra = PRECISION.get(name, {})
    args = TrainingArguments(str(tmp_path), deepspeed=CONFIGS[name], **ARGUMENTS, **extra)
    ours = fill_deepspeed_config(args, world_size=1, model=tiny_gpt2(), num_training_steps=STEPS)
    assert ours == transformers_filled(CONFIGS[name], tmp_path, extra)


def test_mismatched_value_is_refused_like_transformers(tmp_path) -> None:
    """A fixed value that disagrees with the arguments raises, naming the key and both values."""
    args = TrainingArguments(str(tmp_path), deepspeed={"gradient_clipping": 2.0}, **ARGUMENTS)
    with pytest.raises(ValueError, match=r"gradient_clipping=2.0 vs hf max_grad_norm=0.5"):
        fill_deepspeed_config(args, num_training_steps=STEPS)


def test_json_path_is_read(tmp_path) -> None:
    """``deepspeed`` may be the path of a JSON file."""
    path = tmp_path / "ds.json"
    path.write_text('{"zero_optimization": {"stage": 2}, "gradient_accumulation_steps": "auto"}')
    args = TrainingArguments(str(tmp_path), deepspeed=str(path), **ARGUMENTS)
    filled = fill_deepspeed_config(args)
    assert filled["gradient_accumulation_steps"] == 2 and zero_stage(filled) == 2


def test_plan_shows_the_deepspeed_strategy(tmp_path) -> None:
    """``to_lightning`` plans DeepSpeed with the config's ZeRO stage; mismatches raise already here."""
    from hf_lightning.adapters.plan import to_lightning

    plan = to_lightning(
        TrainingArguments(str(tmp_path), use_cpu=True, deepspeed={"zero_optimization": {"stage": 3}})
    )
    assert plan.distributed.deepspeed is not None and plan.distributed.deepspeed.stage == 3
    assert "DeepSpeedStrategy(config=<ZeRO stage 3" in plan.describe()
    with pytest.raises(ValueError, match="gradient_clipping"):
        to_lightning(TrainingArguments(str(tmp_path), deepspeed={"gradient_clipping": 9.0}))


def test_engine_config_trains_with_the_trainers_optimizer(tmp_path) -> None:
    """The engine gets the Trainer's optimizer (allowed under ZeRO) and accumulates through the Trainer's windows."""
    from hf_lightning.adapters.deepspeed import engine_config

    config = {
        "zero_optimization": {"stage": 2},
        "gradient_accumulation_steps": "auto",
        "train_batch_size": "auto",
    }
    args = TrainingArguments(str(tmp_path), deepspeed=config, **ARGUMENTS)
    filled = engine_config(args, world_size=2, model=tiny_gpt2(), num_training_steps=STEPS)
    assert filled["zero_allow_untested_optimizer"] is True
    assert "gradient_accumulation_steps" not in filled and "train_batch_size" not in filled
    assert filled["zero_optimization"]["stage"] == 2


@pytest.mark.parametrize("section", ["optimizer", "scheduler"])
def test_deepspeed_optimizer_or_scheduler_section_is_refused_by_name(tmp_path, section: str) -> None:
    """A DeepSpeed-built optimizer or scheduler is not wired yet: NotImplementedError naming the section."""
    from hf_lightning.adapters.deepspeed import engine_config

    config = {"zero_optimization": {"stage": 2}, section: {"type": "AdamW", "params": {}}}
    args = TrainingArguments(str(tmp_path), deepspeed=config, **ARGUMENTS)
    with pytest.raises(NotImplementedError, match=f"DeepSpeed `{section}` section"):
        engine_config(args, world_size=1, model=tiny_gpt2(), num_training_steps=STEPS)


def test_deepspeed_runs_train_with_checkpoints(tmp_path) -> None:
    """Checkpoints under DeepSpeed are written (transformers' layout): the fit takes DeepSpeedModule with them."""
    from hf_lightning.adapters.fit import _module_class
    from hf_lightning.adapters.plan import to_lightning

    plan = to_lightning(TrainingArguments(str(tmp_path), deepspeed={"zero_optimization": {"stage": 2}}))
    assert _module_class(plan).__name__ == "DeepSpeedModule"
