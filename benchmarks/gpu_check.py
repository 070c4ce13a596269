"""The GPU check kit: one script, one GPU, under 8 minutes; writes a JSON file and a markdown table.

Checks (each in the order below, each timed; one failing check never stops the others):

- ``bf16_vs_transformers`` / ``fp16_vs_transformers``: the same tiny GPT-2 trained with
  ``hf_lightning.Trainer`` and ``transformers.Trainer`` in mixed precision; the logged losses must agree
  within ``LOSS_TOLERANCE`` (relative);
- ``fp16_resume_bitwise``: fp16 training saved at step 2 and resumed to step 4 in a new Trainer ends
  with bit-identical weights to the uninterrupted run (GradScaler and CUDA RNG state restored);
- ``fsdp_one_gpu``: ``fsdp=True`` (FSDP2 through Lightning's ModelParallelStrategy) trains on one GPU;
- ``fsdp_sharded_checkpoint_resume``: FSDP2 with ``SHARDED_STATE_DICT`` checkpoints, resumed bit-identically;
- ``fsdp1_one_gpu``: FSDP1 (``fsdp_config['version'] = 1``, Lightning's FSDPStrategy given the GPU's index)
  trains to the losses of the run without FSDP;
- ``deepspeed_zero2``: a ZeRO-2 run whose losses equal the run without DeepSpeed;
- ``optim_<name>``: the CUDA-only optimizers (``paged_adamw_8bit``, ``galore_adamw_8bit``, ``adalomo``)
  trained with both trainers: the losses must agree within ``LOSS_TOLERANCE``;
- ``liger_kernel``: ``use_liger_kernel=True`` trains (its Triton kernels need CUDA), losses against
  transformers within ``LOSS_TOLERANCE``;
- ``step_benchmark``: ``benchmarks/bench_step.py`` (raw loop / transformers / hf_lightning on W1, W2);
- ``eval_memory``: ``benchmarks/bench_eval_memory.py`` (GPU peak during ``evaluate()``).

    python benchmarks/gpu_check.py --out gpu_check.json        # on a GPU machine
    python benchmarks/gpu_check.py --dry-run --out smoke.json  # on CPU: the kit's own smoke test

``--dry-run`` runs every check that can run on CPU with 2 steps in 32-bit precision (the GPU-only
ones are reported "skipped") and the benchmarks not at all: it shows that the kit runs end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

LOSS_TOLERANCE = 0.02
"""Relative tolerance between hf_lightning's and transformers' mixed-precision losses."""
HERE = os.path.dirname(os.path.abspath(__file__))


def _model() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=64, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    model = GPT2LMHeadModel(config)
    model.loss_type = (
        "ForCausalLM"  # transformers then counts shifted labels as hf_lightning does (divergences.md)
    )
    return model


def _data(n: int = 64) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [
        {"input_ids": (ids := torch.randint(0, 256, (32,), generator=g)), "labels": ids} for _ in range(n)
    ]


def _arguments(module: Any, out: str, ctx: dict, **extra: Any) -> Any:
    settings = dict(max_steps=ctx["steps"], per_device_train_batch_size=4, learning_rate=1e-3, logging_steps=1,
                    report_to="none", disable_tqdm=True, save_strategy="no", seed=0, use_cpu=not ctx["cuda"])  # fmt: skip
    return module.TrainingArguments(out, **{**settings, **extra})


def _losses(module: Any, ctx: dict, **extra: Any) -> list[float]:
    with tempfile.TemporaryDirectory() as out:
        trainer = module.Trainer(
            model=_model(), args=_arguments(module, out, ctx, **extra), train_dataset=_data()
        )
        trainer.train()
    return [e["loss"] for e in trainer.state.log_history if "loss" in e]


def _against_transformers(precision: str) -> Callable[[dict], dict]:
    def check(ctx: dict) -> dict:
        import transformers

        import hf_lightning

        if precision == "fp16" and not ctx["cuda"]:
            return {"status": "skipped", "detail": "fp16 needs CUDA"}
        extra = {precision: True} if ctx["cuda"] else {}  # the dry run compares in 32-bit
        ours, theirs = _losses(hf_lightning, ctx, **extra), _losses(transformers, ctx, **extra)
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(ours, theirs, strict=True))
        return {"status": "pass" if worst <= LOSS_TOLERANCE else "fail",
                "detail": f"max relative loss difference {worst:.2e} (tolerance {LOSS_TOLERANCE})"}  # fmt: skip

    return check


def _resume_bitwise(ctx: dict) -> dict:
    import hf_lightning

    precision = {"fp16": True} if ctx["cuda"] else {}
    with tempfile.TemporaryDirectory() as out:
        args = _arguments(
            hf_lightning, out, {**ctx, "steps": 4}, save_strategy="steps", save_steps=2, **precision
        )
        whole = _model()
        hf_lightning.Trainer(model=whole, args=args, train_dataset=_data()).train()
        resumed = _model()
        trainer = hf_lightning.Trainer(model=resumed, args=args, train_dataset=_data())
        trainer.train(resume_from_checkpoint=os.path.join(out, "checkpoint-2"))
    same = all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), resumed.state_dict().values()))
    label = "fp16 + CUDA RNG" if ctx["cuda"] else "fp32 on CPU (dry run)"
    return {"status": "pass" if same else "fail", "detail": f"{label}: weights bit-identical = {same}"}


def _fsdp_one_device(ctx: dict) -> dict:
    import hf_lightning

    with tempfile.TemporaryDirectory() as out:
        args = _arguments(hf_lightning, out, ctx, fsdp=True)
        trainer = hf_lightning.Trainer(model=_model(), args=args, train_dataset=_data())
        trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return {"status": "pass" if len(losses) == ctx["steps"] else "fail", "detail": f"losses {losses}"}


def _fsdp_sharded_resume(ctx: dict) -> dict:
    """FSDP2 with sharded checkpoints: resumed at step 2, the weights equal the uninterrupted run's."""
    import hf_lightning

    fsdp = {"fsdp": True, "fsdp_config": {"state_dict_type": "SHARDED_STATE_DICT"}}
    with tempfile.TemporaryDirectory() as out:
        args = _arguments(hf_lightning, out, {**ctx, "steps": 4}, save_strategy="steps", save_steps=2, **fsdp)
        whole = hf_lightning.Trainer(model=_model(), args=args, train_dataset=_data())
        whole.train()
        expected = {
            k: v.full_tensor() if hasattr(v, "full_tensor") else v
            for k, v in whole.model.state_dict().items()
        }
        resumed = hf_lightning.Trainer(model=_model(), args=args, train_dataset=_data())
        resumed.train(resume_from_checkpoint=os.path.join(out, "checkpoint-2"))
        got = {
            k: v.full_tensor() if hasattr(v, "full_tensor") else v
            for k, v in resumed.model.state_dict().items()
        }
        layout = sorted(
            n for n in os.listdir(os.path.join(out, "checkpoint-2")) if "fsdp" in n or n == "optimizer_0"
        )
    same = all(torch.equal(expected[name], got[name]) for name in expected)
    return {"status": "pass" if same and layout == ["optimizer_0", "pytorch_model_fsdp_0"] else "fail",
            "detail": f"{layout}; resumed weights bit-identical = {same}"}  # fmt: skip


def _fsdp1_one_device(ctx: dict) -> dict:
    """FSDP1 on one device: the losses equal the run without FSDP (within ``LOSS_TOLERANCE``)."""
    import hf_lightning

    plain = _losses(hf_lightning, ctx)
    fsdp1 = _losses(hf_lightning, ctx, fsdp="full_shard", fsdp_config={"version": 1})
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(fsdp1, plain, strict=True))
    return {"status": "pass" if worst <= LOSS_TOLERANCE else "fail",
            "detail": f"FSDP1 vs no FSDP: max relative loss difference {worst:.2e}"}  # fmt: skip


def _deepspeed_zero2(ctx: dict) -> dict:
    """A ZeRO-2 run through Lightning's DeepSpeedStrategy; its losses equal the plain run's."""
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        install = 'DS_BUILD_OPS=0 pip install --no-build-isolation "deepspeed>=0.16"'
        return {"status": "skipped", "detail": f"needs DeepSpeed: {install}"}
    if not ctx["cuda"]:
        return {"status": "skipped", "detail": "CPU runs: tests/adapters/test_deepspeed_training.py"}
    import hf_lightning

    config = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto",
              "gradient_accumulation_steps": "auto", "gradient_clipping": "auto"}  # fmt: skip
    plain, zero2 = _losses(hf_lightning, ctx), _losses(hf_lightning, ctx, deepspeed=config)
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(zero2, plain, strict=True))
    return {"status": "pass" if worst <= LOSS_TOLERANCE else "fail",
            "detail": f"ZeRO-2 vs no DeepSpeed: max relative loss difference {worst:.2e}"}  # fmt: skip


def _cuda_against_transformers(package: str, **extra: Any) -> Callable[[dict], dict]:
    """A CUDA-only feature (an optimizer, Liger's kernels) trained by both trainers."""

    def check(ctx: dict) -> dict:
        import importlib.util

        if not ctx["cuda"]:
            return {"status": "skipped", "detail": "needs CUDA"}
        if importlib.util.find_spec(package) is None:
            return {"status": "skipped", "detail": f"{package} is not installed (docs/optimizers.md)"}
        return _against_transformers_with(ctx, **extra)

    return check


def _against_transformers_with(ctx: dict, **extra: Any) -> dict:
    import transformers

    import hf_lightning

    if "galore" in str(extra.get("optim")):  # GaLore projects the named layers
        extra.setdefault("optim_target_modules", ["attn", "mlp"])
    ours, theirs = _losses(hf_lightning, ctx, **extra), _losses(transformers, ctx, **extra)
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(ours, theirs, strict=True))
    return {"status": "pass" if worst <= LOSS_TOLERANCE else "fail",
            "detail": f"max relative loss difference {worst:.2e} (tolerance {LOSS_TOLERANCE})"}  # fmt: skip


def _benchmark(script: str, *flags: str) -> Callable[[dict], dict]:
    def check(ctx: dict) -> dict:
        if ctx["dry_run"]:
            return {"status": "skipped", "detail": "benchmarks do not run in --dry-run"}
        done = subprocess.run([sys.executable, os.path.join(HERE, script), *flags], capture_output=True, text=True,
                              timeout=ctx["benchmark_timeout"])  # fmt: skip
        return {
            "status": "pass" if done.returncode == 0 else "fail",
            "detail": done.stdout[-3000:] or done.stderr[-2000:],
        }

    return check


CHECKS: dict[str, Callable[[dict], dict]] = {
    "bf16_vs_transformers": _against_transformers("bf16"),
    "fp16_vs_transformers": _against_transformers("fp16"),
    "fp16_resume_bitwise": _resume_bitwise,
    "fsdp_one_gpu": _fsdp_one_device,
    "fsdp_sharded_checkpoint_resume": _fsdp_sharded_resume,
    "fsdp1_one_gpu": _fsdp1_one_device,
    "deepspeed_zero2": _deepspeed_zero2,
    "optim_paged_adamw_8bit": _cuda_against_transformers("bitsandbytes", optim="paged_adamw_8bit"),
    "optim_galore_adamw_8bit": _cuda_against_transformers("galore_torch", optim="galore_adamw_8bit"),
    "optim_adalomo": _cuda_against_transformers("lomo_optim", optim="adalomo"),
    "liger_kernel": _cuda_against_transformers("liger_kernel", use_liger_kernel=True),
    "step_benchmark": _benchmark("bench_step.py", "--rounds", "1", "--cycles", "12"),
    "eval_memory": _benchmark("bench_eval_memory.py", "--length", "4"),
}


def run_checks(dry_run: bool, names: list[str] | None = None) -> list[dict]:
    """Run the checks (all, or ``names``); one record per check, failures caught and reported."""
    ctx = {"cuda": torch.cuda.is_available() and not dry_run, "dry_run": dry_run, "steps": 2 if dry_run else 20,
           "benchmark_timeout": 150}  # fmt: skip
    records = []
    for name in names or list(CHECKS):
        start = time.time()
        try:
            record = CHECKS[name](ctx)
        except Exception as exc:  # a check that crashes is a failed check, the kit goes on
            record = {
                "status": "fail",
                "detail": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}",
            }
        records.append({"check": name, **record, "seconds": round(time.time() - start, 1)})
    return records


def markdown(records: list[dict], device: str) -> str:
    """The records as the table ``docs/performance.md`` shows."""
    lines = [f"GPU check on {device}", "", "| check | status | seconds | detail |", "|---|---|---:|---|"]
    for r in records:
        detail = r["detail"].strip().splitlines()[-1][:160] if r["detail"].strip() else ""
        lines.append(f"| {r['check']} | {r['status']} | {r['seconds']} | {detail.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU smoke run: 2 steps, no benchmarks")
    parser.add_argument(
        "--out", default="gpu_check.json", help="the JSON file; the table goes next to it (.md)"
    )
    parser.add_argument("--checks", nargs="*", choices=list(CHECKS), help="run only these checks")
    options = parser.parse_args(argv)
    device = (
        torch.cuda.get_device_name(0)
        if torch.cuda.is_available() and not options.dry_run
        else "CPU (dry run)"
    )
    records = run_checks(options.dry_run, options.checks)
    with open(options.out, "w", encoding="utf-8") as handle:
        json.dump({"device": device, "torch": torch.__version__, "checks": records}, handle, indent=2)
    table = markdown(records, device)
    with open(os.path.splitext(options.out)[0] + ".md", "w", encoding="utf-8") as handle:
        handle.write(table)
    print(table)
    return 0 if all(r["status"] != "fail" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
