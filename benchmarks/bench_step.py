"""Seconds per optimizer step: hf_lightning.Trainer vs a raw torch loop vs plain Lightning vs transformers.

Workloads (one thread, progress bars and saving off):
  W1  tiny GPT-2: 2 layers, n_embd 64, seq 32, batch 8 (GA 1 and GA 4)
  W2  GPT-2: 4 layers, n_embd 256, seq 128, batch 8

Runs are interleaved over several rounds (the machine is noisy); each figure is the median of the
per-round step times, reported as a ratio to the raw loop measured in the same rounds. Start-up is
the time from the `train()` call to the end of the first optimizer step.

    python benchmarks/bench_step.py [--rounds 5] [--steps 40]
"""

from __future__ import annotations

import argparse
import statistics
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
    return (times[-1] - times[1]) / (len(times) - 2)


def run_raw(w, steps):
    model = make_model(w)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = make_data(w, steps)
    loader = torch.utils.data.DataLoader(data, batch_size=w["batch"], shuffle=True)
    times, start = [], time.perf_counter()
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
        times.append(time.perf_counter())
    return per_step(times), times[0] - start


def _hf_style(lib, w, steps):
    times = []

    class Clock(lib.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.perf_counter())

    args = lib.TrainingArguments(output_dir="/tmp/bench_step", per_device_train_batch_size=w["batch"],
                                 gradient_accumulation_steps=w["ga"], max_steps=steps, learning_rate=1e-3,
                                 logging_steps=10_000, save_strategy="no", report_to="none", disable_tqdm=True,
                                 use_cpu=True, lr_scheduler_type="constant")
    trainer = lib.Trainer(model=make_model(w), args=args, train_dataset=make_data(w, steps), callbacks=[Clock()])
    start = time.perf_counter()
    trainer.train()
    return per_step(times), times[0] - start


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
                times.append(time.perf_counter())

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    loader = torch.utils.data.DataLoader(make_data(w, steps), batch_size=w["batch"], shuffle=True)
    trainer = L.Trainer(max_steps=steps, accumulate_grad_batches=w["ga"], gradient_clip_val=1.0, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu")
    start = time.perf_counter()
    trainer.fit(Plain(), loader)
    return per_step(times), times[0] - start


RUNNERS = {"raw torch": run_raw, "plain Lightning": run_lightning, "transformers.Trainer": run_transformers,
           "hf_lightning.Trainer": run_ours}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    cli = parser.parse_args()
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    print("| workload | framework | s/step (median) | ratio to raw | start-up s |")
    print("|---|---|---:|---:|---:|")
    for name in cli.workloads:
        w = WORKLOADS[name]
        steps = cli.steps if name.startswith("W1") else max(cli.steps // 4, 8)
        results = {k: [] for k in RUNNERS}
        for _ in range(cli.rounds):
            for fw, fn in RUNNERS.items():
                results[fw].append(fn(w, steps))
        raw = [s for s, _ in results["raw torch"]]
        for fw, values in results.items():
            ratios = [s / r for (s, _), r in zip(values, raw)]
            med = statistics.median(s for s, _ in values)
            startup = statistics.median(t for _, t in values)
            print(f"| {name} | {fw} | {med:.4f} | {statistics.median(ratios):.3f} | {startup:.2f} |", flush=True)


if __name__ == "__main__":
    main()
