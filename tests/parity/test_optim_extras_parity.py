"""Parity: the ``optim`` names that need a package (the CPU-capable ones) build the same optimizer as
transformers.Trainer — same class, same parameter groups — train to the same losses over 4 steps, and
resume from a mid-run checkpoint to the weights of the uninterrupted run."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import hf_lightning  # noqa: E402
from tests.parity._run import assert_same_weights, run_both, step_logs  # noqa: E402
from tests.tiny import causal_lm_data, tiny_llama  # noqa: E402


@pytest.fixture(autouse=True)
def _optimi_without_triton(monkeypatch):
    """optimi 0.3.x picks its Triton kernels for CPU tensors whenever Triton is installed (a CUDA build of
    torch brings it), so transformers' own StableAdamW fails on a machine without a GPU. The oracle runs
    with optimi's Triton switch off; hf_lightning's own fix is tested in tests/optim/test_optim_extras.py."""
    try:
        import optimi.utils
    except ImportError:
        return
    monkeypatch.setattr(optimi.utils, "HAS_TRITON", False)


# optim name -> (the package it needs, extra TrainingArguments)
_LOW_RANK = {"optim_target_modules": ["attn", "mlp"], "optim_args": "rank=4,update_proj_gap=2"}
CPU_CASES: dict[str, tuple[str, dict]] = {
    "schedule_free_adamw": ("schedulefree", {"warmup_steps": 1}),
    "schedule_free_sgd": ("schedulefree", {"learning_rate": 1e-2}),
    "schedule_free_radam": ("schedulefree", {}),
    "grokadamw": ("grokadamw", {}),
    "stable_adamw": ("optimi", {}),
    "galore_adamw": ("galore_torch", _LOW_RANK),
    "galore_adafactor": ("galore_torch", _LOW_RANK),
    "galore_adamw_layerwise": ("galore_torch", _LOW_RANK),
    "apollo_adamw": ("apollo_torch", {**_LOW_RANK, "optim_args": "rank=4,update_proj_gap=2,proj=random"}),
    "apollo_adamw_layerwise": ("apollo_torch", _LOW_RANK),
    "lomo": ("lomo_optim", {"learning_rate": 1e-2}),
    "adamw_bnb_8bit": ("bitsandbytes", {}),
    "paged_adamw_32bit": ("bitsandbytes", {}),
    "lion_8bit": ("bitsandbytes", {}),
    "rmsprop_bnb_8bit": ("bitsandbytes", {}),  # optim_args reach RMSprop as strings, in transformers too
    "ademamix_8bit": ("bitsandbytes", {"optim_args": "beta3=0.999,alpha=4.0"}),
    "adamw_torch_4bit": ("torchao", {}),
    "adamw_torch_8bit": ("torchao", {}),
}
HYPER = dict(learning_rate=1e-3, weight_decay=0.01, adam_beta1=0.85, adam_beta2=0.98, adam_epsilon=1e-7)


def _arguments(lib, tmp_path, name: str, **extra):
    package, case = CPU_CASES[name]
    pytest.importorskip(package)
    kwargs = {**hf_args(), **HYPER, **case, "optim": name, **extra}
    return lib.TrainingArguments(output_dir=str(tmp_path), **kwargs)


def hf_args() -> dict:
    return dict(report_to="none", use_cpu=True, disable_tqdm=True, seed=0, save_strategy="no")


def _groups(model, optimizer) -> list[dict]:
    names = {id(p): n for n, p in model.named_parameters()}
    groups = getattr(optimizer, "optimizer_dict", None)
    if groups:  # layer-wise: one inner optimizer per parameter
        return [
            {"param": names[id(p)], "type": type(o).__name__, **_hyper(o.param_groups[0])}
            for p, o in groups.items()
        ]
    return [
        {"params": [names.get(id(p), "?") for p in g["params"]], **_hyper(g)} for g in optimizer.param_groups
    ]


def _hyper(group: dict) -> dict:
    return {k: v for k, v in group.items() if k != "params"}


@pytest.mark.parametrize("name", list(CPU_CASES))
def test_same_class_and_parameter_groups(name, tmp_path):
    """The optimizer is the same class over the same parameter groups with the same hyperparameters."""
    built = {}
    for key, lib in (("hf", transformers), ("ours", hf_lightning)):
        model = tiny_llama()
        trainer = lib.Trainer(model=model, args=_arguments(lib, tmp_path / key, name))
        optimizer = trainer.create_optimizer()
        built[key] = (type(optimizer), _groups(model, optimizer))
    hf_cls, hf_groups = built["hf"]
    ours_cls, ours_groups = built["ours"]
    assert ours_cls.__name__ == hf_cls.__name__
    assert ours_groups == hf_groups


@pytest.mark.parametrize("name", list(CPU_CASES))
def test_same_losses_over_four_steps(name, tmp_path):
    """Four steps with the optimizer give the losses (1e-5), learning rates and weights of transformers."""
    package, case = CPU_CASES[name]
    pytest.importorskip(package)
    runs = run_both(
        lambda _: tiny_llama(),
        causal_lm_data(n=16, vocab=128),
        tmp_path,
        optim=name,
        max_steps=4,
        per_device_train_batch_size=4,
        logging_steps=1,
        **{**HYPER, **case},
    )
    theirs, ours = step_logs(runs["hf"]), step_logs(runs["ours"])
    assert [h["step"] for h in ours] == [1, 2, 3, 4] == [h["step"] for h in theirs]
    for a, b in zip(theirs, ours):
        torch.testing.assert_close(b["loss"], a["loss"], atol=1e-5, rtol=0)
        torch.testing.assert_close(b["learning_rate"], a["learning_rate"], atol=1e-12, rtol=1e-6)
    assert_same_weights(runs["hf"], runs["ours"])


# Not resumable, in transformers either: layer-wise optimizers save no state; GaLore / APOLLO state
# holds projector objects, which a weights_only load refuses (test_optim_extras.py checks our error);
# GrokAdamW keeps its moments in param_groups keyed by the parameter objects, which a state_dict
# round trip cannot map back to the live parameters.
NOT_RESUMABLE = ("galore", "apollo", "grokadamw")
RESUMABLE = [n for n in CPU_CASES if not n.endswith("layerwise") and not n.startswith(NOT_RESUMABLE)]


@pytest.mark.parametrize("name", RESUMABLE)
def test_resume_from_mid_run_checkpoint_reaches_the_same_weights(name, tmp_path):
    """Resuming at step 2 of 4 ends on the weights of the uninterrupted run (optimizer state restored)."""
    data = causal_lm_data(n=16, vocab=128)
    common = dict(max_steps=4, per_device_train_batch_size=4, save_strategy="steps", save_steps=2)
    full = hf_lightning.Trainer(
        model=tiny_llama(),
        args=_arguments(hf_lightning, tmp_path / "full", name, **common),
        train_dataset=data,
    )
    full.train()
    resumed = hf_lightning.Trainer(
        model=tiny_llama(seed=1),
        args=_arguments(hf_lightning, tmp_path / "resumed", name, **common),
        train_dataset=data,
    )
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    assert_same_weights(full, resumed, atol=1e-6)
