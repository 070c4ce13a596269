"""Benchmark: peak memory per rank under FSDP2 versus DDP, world size 2, on CPU (gloo).

A GPT-2 whose parameters and AdamW state dominate memory (8 layers, n_embd 512, vocabulary 8192:
~29M parameters; batches of 2 sequences of 32 tokens) trains 3 optimizer steps with
``hf_lightning.Trainer`` in 2 processes, once with DDP and once with ``fsdp=True``. Each rank samples
its resident set size every millisecond, with hf_lightning's malloc tuning off
(``HF_LIGHTNING_MALLOC_TUNING=0`` and ``MALLOC_MMAP_THRESHOLD_=65536``: a freed tensor leaves the RSS at once);
reported per mode: the peak RSS and its rise over the
RSS just before ``train()`` (the model already built), the larger of the two ranks. Two more FSDP2 runs
save one checkpoint after the last step, ``FULL_STATE_DICT`` (gathered on rank 0) and
``SHARDED_STATE_DICT`` (each rank its shard), with the seconds that save took.

    python benchmarks/bench_fsdp_memory.py          # the table, as in docs/performance.md
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

_SAVE = {"save_strategy": "steps", "save_steps": 3}  # one checkpoint, after the last step
MODES = {
    "DDP": {},
    "FSDP2 (full_shard)": {"fsdp": True},
    "FSDP2 + FULL_STATE_DICT checkpoint": {"fsdp": True, **_SAVE},
    "FSDP2 + SHARDED_STATE_DICT checkpoint": {
        "fsdp": True,
        "fsdp_config": {"state_dict_type": "SHARDED_STATE_DICT"},
        **_SAVE,
    },
}


def _rss_mib() -> float:
    with open("/proc/self/statm", encoding="ascii") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _rank(mode: str, out: str) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from hf_lightning import Trainer, TrainingArguments

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=8, n_embd=512, n_head=8, vocab_size=8192, n_positions=64))
    g = torch.Generator().manual_seed(0)
    data = [
        {"input_ids": (ids := torch.randint(0, 8192, (32,), generator=g)), "labels": ids} for _ in range(16)
    ]
    settings = {"use_cpu": True, "report_to": "none", "disable_tqdm": True, "save_strategy": "no", "max_steps": 3,
                "per_device_train_batch_size": 2, **MODES[mode]}  # fmt: skip
    args = TrainingArguments(out, **settings)
    peak, done = [_rss_mib()], threading.Event()
    start = peak[0]

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mib())
            time.sleep(0.001)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    trainer = Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    done.set()
    thread.join()
    params = sum(p.numel() for p in model.parameters())
    save = trainer.checkpoints.last_save_seconds
    record = {"peak": peak[0], "rise": peak[0] - start, "params": params, "save_s": save}
    print("@@mem " + json.dumps(record), flush=True)


def _run(mode: str) -> list[dict]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    procs = []
    with tempfile.TemporaryDirectory() as out:
        for rank in range(2):
            env = {
                **os.environ,
                "WORLD_SIZE": "2",
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                "OMP_NUM_THREADS": "1",
                "HF_LIGHTNING_MALLOC_TUNING": "0",
                "MALLOC_MMAP_THRESHOLD_": "65536",
            }  # fmt: skip  (freed tensors leave the RSS at once)
            command = [sys.executable, __file__, "--rank", mode, out]
            procs.append(
                subprocess.Popen(
                    command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
                )
            )
        logs = [proc.communicate(timeout=900)[0] for proc in procs]
    records = [json.loads(line[6:]) for log in logs for line in log.splitlines() if line.startswith("@@mem ")]
    if len(records) != 2:
        raise RuntimeError(f"{mode}: a rank failed:\n{logs[0][-3000:]}\n{logs[1][-3000:]}")
    return records


def main() -> None:
    results = {mode: _run(mode) for mode in MODES}
    ddp_peak = max(r["peak"] for r in results["DDP"])
    ddp_rise = max(r["rise"] for r in results["DDP"])
    print(
        "| mode | peak RSS per rank (MiB) | rise during train() (MiB) | peak vs DDP | rise vs DDP | save (s) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for mode, records in results.items():
        peak, rise = max(r["peak"] for r in records), max(r["rise"] for r in records)
        saves = [r["save_s"] for r in records if r["save_s"] is not None]
        save = f"{max(saves):.2f}" if saves else "-"
        print(
            f"| {mode} | {peak:.0f} | {rise:.0f} | {peak / ddp_peak:.2f}x | {rise / ddp_rise:.2f}x | {save} |"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        _rank(sys.argv[2], sys.argv[3])
    else:
        main()
