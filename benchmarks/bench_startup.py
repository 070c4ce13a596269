"""Start-up: process start to the end of the first optimizer step, hf_lightning.Trainer against transformers.

Each run is a fresh Python process (one thread) that imports the library, builds the model, the
``TrainingArguments`` and the ``Trainer``, and calls ``train()`` with ``max_steps=1``; a callback notes the
end of the first optimizer step. The parent notes the wall clock just before it starts the process. A raw
torch loop (the model, AdamW, one step) is the floor. Workloads are bench_step.py's: W1 (tiny GPT-2: 2
layers, n_embd 64, seq 32, batch 8) and W2 (4 layers, n_embd 256, seq 128, batch 8). In each round the
three programs run in a random order, so a drift of the machine's speed hits them alike.

Reported per program (medians over rounds; the ratio column is the median of the per-round ratios to
transformers' total):

- **import s**: process start to the end of ``import <library>`` (with the interpreter's own start-up);
- **model + Trainer() s**: building the model, the arguments and the ``Trainer``;
- **train() to first step s**: from calling ``train()`` to the end of its first optimizer step;
- **total s**: process start to the end of the first optimizer step, and the part above the raw loop.

    python benchmarks/bench_startup.py [--rounds 5] [--workloads W1 W2] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOADS = {
    "W1": dict(n_layer=2, n_embd=64, seq=32, batch=8),
    "W2": dict(n_layer=4, n_embd=256, seq=128, batch=8),
}
PROGRAMS = ("raw", "transformers", "hf_lightning")
MARK = "@@bench "


def _model(w: dict):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=w["n_layer"], n_embd=w["n_embd"], n_head=4, vocab_size=256, n_positions=w["seq"],
                        bos_token_id=0, eos_token_id=0)  # fmt: skip
    return GPT2LMHeadModel(config)


def _data(w: dict) -> list[dict]:
    import torch

    ids = torch.randint(0, 256, (w["batch"] * 4, w["seq"]), generator=torch.Generator().manual_seed(0))
    return [{"input_ids": r, "labels": r.clone()} for r in ids]


def serve(program: str, workload: str, out: str) -> None:
    """Child: time the phases up to the end of the first optimizer step."""
    w = WORKLOADS[workload]
    marks = {"imported": 0.0, "built": 0.0, "first_step_end": 0.0}
    import torch

    torch.set_num_threads(1)
    if program == "raw":
        marks["imported"] = time.time()
        model = _model(w)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        batch = torch.utils.data.default_collate(_data(w)[: w["batch"]])
        marks["built"] = time.time()
        model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        marks["first_step_end"] = time.time()
    else:
        lib = __import__(program)
        marks["imported"] = time.time()

        class FirstStep(lib.TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                marks["first_step_end"] = marks["first_step_end"] or time.time()

        args = lib.TrainingArguments(output_dir=out, per_device_train_batch_size=w["batch"], max_steps=1,
                                     save_strategy="no", logging_steps=10_000, report_to="none",
                                     disable_tqdm=True, use_cpu=True)  # fmt: skip
        trainer = lib.Trainer(model=_model(w), args=args, train_dataset=_data(w), callbacks=[FirstStep()])
        marks["built"] = time.time()
        trainer.train()
    print(MARK + json.dumps(marks), flush=True)


def _run(program: str, workload: str, folder: str) -> dict[str, float]:
    env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    started = time.time()
    done = subprocess.run([sys.executable, __file__, "--serve", program, workload, folder],
                          capture_output=True, text=True, env=env)  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            marks = json.loads(line[len(MARK) :])
            return {
                "import": marks["imported"] - started,
                "build": marks["built"] - marks["imported"],
                "train": marks["first_step_end"] - marks["built"],
                "total": marks["first_step_end"] - started,
            }
    raise RuntimeError(f"{program} {workload} failed:\n{done.stderr[-4000:]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=sorted(WORKLOADS))
    parser.add_argument("--seed", type=int, default=0, help="seeds the order of the runs")
    parser.add_argument("--json", help="also write every run's figures here")
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    cli = parser.parse_args()
    if cli.serve:
        return serve(*cli.serve)
    order = random.Random(cli.seed)
    runs: dict[str, dict[str, list[dict[str, float]]]] = {w: {p: [] for p in PROGRAMS} for w in cli.workloads}
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp:
        for _ in range(cli.rounds):
            for workload in cli.workloads:
                for program in order.sample(PROGRAMS, len(PROGRAMS)):
                    runs[workload][program].append(_run(program, workload, os.path.join(tmp, program)))
    print(f"Start-up, {cli.rounds} rounds; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("| workload | program | import s | model + Trainer() s | train() to first step s | total s "
          "| above raw s | total vs transformers |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for workload, by_program in runs.items():
        for program, figures in by_program.items():
            med = {key: statistics.median(f[key] for f in figures) for key in figures[0]}
            above = statistics.median(f["total"] - r["total"] for f, r in zip(figures, by_program["raw"]))
            ratio = statistics.median(
                f["total"] / t["total"] for f, t in zip(figures, by_program["transformers"])
            )
            print(f"| {workload} | {program} | {med['import']:.2f} | {med['build']:.2f} | {med['train']:.2f} "
                  f"| {med['total']:.2f} | {above:.2f} | {ratio:.2f}x |")  # fmt: skip
    if cli.json:
        with open(cli.json, "w") as handle:
            json.dump(runs, handle, indent=1)


if __name__ == "__main__":
    main()
