"""Seconds per optimizer step: hf_lightning.Trainer vs a raw torch loop vs plain Lightning vs transformers.

Workloads (one thread, progress bars and saving off):
  W1  tiny GPT-2: 2 layers, n_embd 64, seq 32, batch 8 (GA 1 and GA 4)
  W2  GPT-2: 4 layers, n_embd 256, seq 128, batch 8

Every run is a fresh process (so one framework's process-wide settings, such as hf_lightning's
allocator tuning, never help another's), interleaved over several rounds in a fresh random order
each round (the machine is noisy); each figure is the median over rounds of the per-run step time
(the median step interval of the run) as a ratio to the raw loop of the same round, with the range
over rounds beside it; the best-run ratio divides each framework's fastest run by the raw loop's
fastest (the cost without interference, as timeit reports it); "vs transformers" is the median over
rounds of the run's step time over transformers.Trainer's of the same round. W2 runs a quarter of
the steps (8 to 12). Start-up is process start to the end of the first optimizer step.

    python benchmarks/bench_step.py [--rounds 7] [--steps 200] [--seed 0] [--json runs.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

import torch

torch.set_num_threads(1)

WORKLOADS = {
    "W1 GA1": dict(n_layer=2, n_embd=64, seq=32, batch=8, ga=1),
    "W1 GA4": dict(n_layer=2, n_embd=64, seq=32, batch=8, ga=4),
    "W2": dict(n_layer=4, n_embd=256, seq=128, batch=8, ga=1),
}


def make_model(w):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=w["n_layer"], n_embd=w["n_embd"], n_head=4, vocab_size=256, n_positions=w["seq"],
                     bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg)


def make_data(w, n_steps):
    g = torch.Generator().manual_seed(0)
    n = w["batch"] * w["ga"] * n_steps
    ids = torch.randint(0, 256, (n, w["seq"]), generator=g)
    return [{"input_ids": r, "labels": r.clone()} for r in ids]


def per_step(times):
    """Seconds per step, and the absolute end time of the first step.

    The median of the step-to-step intervals after two warm-up steps: on a shared machine a step is
    now and then stalled by another process for several times its length, and a mean would charge
    those stalls to whichever framework happened to be running.
    """
    return statistics.median(b - a for a, b in zip(times[1:], times[2:])), times[0]


def run_raw(w, steps):
    model = make_model(w)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)  # the Trainers' default optim
    data = make_data(w, steps)
    loader = torch.utils.data.DataLoader(data, batch_size=w["batch"], shuffle=True)
    times = []
    it = iter(loader)
    for _ in range(steps):
        batches = [next(it) for _ in range(w["ga"])]
        n_items = sum((b["labels"][:, 1:] != -100).sum() for b in batches)
        for b in batches:
            loss = model(**b, num_items_in_batch=n_items).loss
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        times.append(time.time())
    return per_step(times)


def _hf_style(lib, w, steps):
    times = []

    class Clock(lib.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.time())

    args = lib.TrainingArguments(output_dir="/tmp/bench_step", per_device_train_batch_size=w["batch"],
                                 gradient_accumulation_steps=w["ga"], max_steps=steps, learning_rate=1e-3,
                                 logging_steps=10_000, save_strategy="no", report_to="none", disable_tqdm=True,
                                 use_cpu=True, lr_scheduler_type="constant")
    trainer = lib.Trainer(model=make_model(w), args=args, train_dataset=make_data(w, steps), callbacks=[Clock()])
    trainer.train()
    return per_step(times)


def run_transformers(w, steps):
    import transformers

    return _hf_style(transformers, w, steps)


def run_ours(w, steps):
    import hf_lightning

    return _hf_style(hf_lightning, w, steps)


def run_lightning(w, steps):
    import lightning as L

    times = []

    class Plain(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = make_model(w)

        def training_step(self, batch, idx):
            return self.model(**batch).loss

        def on_train_batch_end(self, *a):
            if self.trainer.fit_loop._should_accumulate() is False:
                times.append(time.time())

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3, fused=True)

    loader = torch.utils.data.DataLoader(make_data(w, steps), batch_size=w["batch"], shuffle=True)
    trainer = L.Trainer(max_steps=steps, accumulate_grad_batches=w["ga"], gradient_clip_val=1.0, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu")
    trainer.fit(Plain(), loader)
    return per_step(times)


RUNNERS = {"raw torch": run_raw, "plain Lightning": run_lightning, "transformers.Trainer": run_transformers,
           "hf_lightning.Trainer": run_ours}


def run_one(framework: str, workload: str, steps: int) -> None:
    """Child process: one run, printed as JSON."""
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    step, first_step_end = RUNNERS[framework](WORKLOADS[workload], steps)
    print(json.dumps({"step": step, "first_step_end": first_step_end}))


def spawn(framework: str, workload: str, steps: int) -> tuple[float, float]:
    started = time.time()
    out = subprocess.run([sys.executable, __file__, "--one", framework, workload, str(steps)],
                         capture_output=True, text=True, check=True, env={**os.environ, "TQDM_DISABLE": "1"})
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["step"], result["first_step_end"] - started


def _compile_bytecode() -> None:
    """Byte-compile hf_lightning once, as a regular (non-editable) install does.

    transformers and Lightning were compiled by pip; an editable checkout under
    PYTHONDONTWRITEBYTECODE=1 would otherwise recompile hf_lightning's sources at every start-up.
    """
    import compileall
    import importlib.util

    for name in ("hf_lightning", "hf_lightning.adapters"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            for folder in spec.submodule_search_locations:
                compileall.compile_dir(folder, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0, help="seeds the order of the frameworks in each round")
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--json", help="also write every run's (s/step, start-up) here")
    parser.add_argument("--one", nargs=3, metavar=("FRAMEWORK", "WORKLOAD", "STEPS"), help=argparse.SUPPRESS)
    cli = parser.parse_args()
    if cli.one:
        run_one(cli.one[0], cli.one[1], int(cli.one[2]))
        return
    _compile_bytecode()
    order = random.Random(cli.seed)
    print("| workload | framework | s/step (median) | ratio to raw (median of rounds) | ratio range "
          "| best-run ratio | vs transformers (median of rounds) | start-up s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    record = {}
    for name in cli.workloads:
        steps = cli.steps if name.startswith("W1") else min(max(cli.steps // 4, 8), 12)
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in RUNNERS}
        for _ in range(cli.rounds):
            for fw in order.sample(list(RUNNERS), len(RUNNERS)):  # no framework always runs first
                results[fw].append(spawn(fw, name, steps))
        record[name] = results
        raw = [s for s, _ in results["raw torch"]]
        hf = [s for s, _ in results["transformers.Trainer"]]
        for fw, values in results.items():
            ratios = [s / r for (s, _), r in zip(values, raw)]
            vs_hf = statistics.median(s / h for (s, _), h in zip(values, hf))
            med = statistics.median(s for s, _ in values)
            best = min(s for s, _ in values) / min(raw)
            startup = statistics.median(t for _, t in values)
            print(f"| {name} | {fw} | {med:.4f} | {statistics.median(ratios):.3f} | "
                  f"{min(ratios):.2f}–{max(ratios):.2f} | {best:.3f} | {vs_hf:.3f} | {startup:.2f} |", flush=True)
    if cli.json:
        with open(cli.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
