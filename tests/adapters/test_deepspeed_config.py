"""DeepSpeed ``"auto"`` values are filled exactly as transformers' ``HfTrainerDeepSpeedConfig`` fills them.

transformers' class needs the ``deepspeed`` package to be constructed; its two filling methods do not,
so the oracle runs them on an instance built with Accelerate's base initialiser only.
"""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from accelerate.utils.deepspeed import HfDeepSpeedConfig as AccelerateConfig
from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

from hf_lightning import TrainingArguments
from hf_lightning.adapters.deepspeed import deepspeed_settings, fill_deepspeed_config, zero_stage
from hf_lightning.args.deepspeed_config import trainer_deepspeed_settings
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
    filled = engine_config(deepspeed_settings(args, 2, cpu=True), model=tiny_gpt2(), num_training_steps=STEPS)
    assert filled["zero_allow_untested_optimizer"] is True
    assert "gradient_accumulation_steps" not in filled and "train_batch_size" not in filled
    assert filled["zero_optimization"]["stage"] == 2


def test_sections_are_built_by_the_trainer_not_passed_to_the_engine(tmp_path) -> None:
    """The ``optimizer``/``scheduler`` sections become the Trainer's objects; the engine config has neither,
    and without a ``gradient_clipping`` key it clips at 1.0, as transformers (Accelerate) sets it."""
    from hf_lightning.adapters.deepspeed import engine_config

    config = {"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}}  # fmt: skip
    args = TrainingArguments(str(tmp_path), deepspeed=config, **ARGUMENTS)
    filled = engine_config(deepspeed_settings(args, 1, cpu=True), model=tiny_gpt2(), num_training_steps=STEPS)
    assert "optimizer" not in filled and "scheduler" not in filled
    assert filled["gradient_clipping"] == 1.0


def test_section_optimizer_is_adamw_over_every_trainable_parameter(tmp_path) -> None:
    """An AdamW section: torch's AdamW, the filled lr/betas/eps/weight decay, one group as DeepSpeed builds it;
    ``Adam`` with ``adam_w_mode: false`` is torch's Adam."""
    from hf_lightning.adapters.deepspeed_sections import section_optimizer

    auto = {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}
    model = tiny_gpt2()
    args = TrainingArguments(str(tmp_path), deepspeed={"zero_optimization": {"stage": 2},
                             "optimizer": {"type": "AdamW", "params": auto}}, **ARGUMENTS)  # fmt: skip
    optimizer = section_optimizer(trainer_deepspeed_settings(args), model)
    assert type(optimizer) is torch.optim.AdamW and len(optimizer.param_groups) == 1
    group = optimizer.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (
        args.learning_rate, (args.adam_beta1, args.adam_beta2), args.adam_epsilon, args.weight_decay)  # fmt: skip
    assert len(group["params"]) == len(list(model.parameters()))
    plain = {
        "zero_optimization": {"stage": 2},
        "optimizer": {"type": "Adam", "params": {"adam_w_mode": False}},
    }
    args = TrainingArguments(str(tmp_path), deepspeed=plain, **ARGUMENTS)
    assert type(section_optimizer(trainer_deepspeed_settings(args), model)) is torch.optim.Adam


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ({"optimizer": {"type": "Lamb", "params": {}}}, "'Lamb'"),
        ({"optimizer": {"type": "AdamW", "params": {"bias_correction": False}}}, "bias_correction"),
        ({"scheduler": {"type": "CosineWithRestarts", "params": {}}}, "WarmupDecayLR"),
    ],
)
def test_sections_not_built_here_are_refused_by_name(tmp_path, section, named) -> None:
    """A section type or parameter not built here raises NotImplementedError naming it and the choices."""
    from hf_lightning.adapters.deepspeed_sections import section_optimizer, section_scheduler

    args = TrainingArguments(
        str(tmp_path), deepspeed={"zero_optimization": {"stage": 2}, **section}, **ARGUMENTS
    )
    model = tiny_gpt2()
    with pytest.raises(NotImplementedError, match=named):
        optimizer = section_optimizer(trainer_deepspeed_settings(args), model) or torch.optim.SGD(
            model.parameters(), lr=0.1
        )
        section_scheduler(trainer_deepspeed_settings(args), optimizer, STEPS, model)


def test_section_scheduler_is_deepspeeds_class_with_filled_values(tmp_path) -> None:
    """A WarmupLR section is DeepSpeed's WarmupLR with the warmup steps and peak rate of the arguments."""
    pytest.importorskip("deepspeed")  # the `deepspeed` extra
    from deepspeed.runtime.lr_schedules import WarmupLR

    from hf_lightning.adapters.deepspeed_sections import section_scheduler

    config = {"zero_optimization": {"stage": 2}, "scheduler": {"type": "WarmupLR", "params": {
        "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto", "warmup_type": "linear"}}}  # fmt: skip
    args = TrainingArguments(str(tmp_path), deepspeed=config, **{**ARGUMENTS, "warmup_steps": 3})
    model = tiny_gpt2()
    scheduler = section_scheduler(
        trainer_deepspeed_settings(args), torch.optim.SGD(model.parameters(), lr=1.0), STEPS, model
    )
    assert isinstance(scheduler, WarmupLR)
    assert scheduler.warmup_num_steps == 3 and scheduler.max_lrs == [args.learning_rate]


def test_deepspeed_runs_train_with_checkpoints(tmp_path) -> None:
    """Checkpoints under DeepSpeed are written (transformers' layout): the fit takes DeepSpeedModule with them."""
    from hf_lightning.adapters.fit import _module_class
    from hf_lightning.adapters.plan import to_lightning

    plan = to_lightning(TrainingArguments(str(tmp_path), deepspeed={"zero_optimization": {"stage": 2}}))
    assert _module_class(plan).__name__ == "DeepSpeedModule"


def test_section_adam_takes_deepspeeds_defaults(tmp_path) -> None:
    """Without ``weight_decay`` DeepSpeed's Adam kernels decay nothing (torch's AdamW would take 0.01), and
    AMSGrad, which they lack, needs ``torch_adam``."""
    from hf_lightning.adapters.deepspeed_sections import section_optimizer

    def build(params: dict) -> torch.optim.Optimizer | None:
        config = {"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": params}}
        return section_optimizer(
            trainer_deepspeed_settings(TrainingArguments(str(tmp_path), deepspeed=config, **ARGUMENTS)),
            tiny_gpt2(),
        )

    assert build({"lr": "auto"}).param_groups[0]["weight_decay"] == 0.0  # type: ignore[union-attr]
    assert build({"torch_adam": True}).param_groups[0]["weight_decay"] == 0.01  # type: ignore[union-attr]
    with pytest.raises(NotImplementedError, match="amsgrad"):
        build({"amsgrad": True})


def test_lightning_users_strategy_leaves_the_sections_to_the_module(tmp_path) -> None:
    """``to_lightning(args).strategy`` carries no section (``DeepSpeedModule`` builds them), lets ZeRO-Offload
    step that client optimizer, and refuses ``load_universal`` (read with a full unpickler)."""
    pytest.importorskip("deepspeed")  # the `deepspeed` extra: the strategy is built with it
    from hf_lightning.adapters.plan import to_lightning

    config = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
              "optimizer": {"type": "AdamW", "params": {}}, "scheduler": {"type": "WarmupLR", "params": {}}}  # fmt: skip
    strategy = to_lightning(TrainingArguments(str(tmp_path), deepspeed=config, **ARGUMENTS)).strategy
    assert "optimizer" not in strategy.config and "scheduler" not in strategy.config
    assert strategy.config["zero_force_ds_cpu_optimizer"] is False
    universal = {"zero_optimization": {"stage": 2}, "checkpoint": {"load_universal": True}}
    with pytest.raises(NotImplementedError, match="load_universal"):
        _ = to_lightning(TrainingArguments(str(tmp_path), deepspeed=universal, **ARGUMENTS)).strategy
