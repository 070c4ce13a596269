"""Saving and resuming checkpoints: hf_lightning.Trainer against transformers.Trainer, in the same run.

A GPT-2 sized so that a checkpoint (weights + AdamW state) weighs ``--size`` (``400MB``: 6 layers,
n_embd 512, vocabulary 32,000, 424 MB; ``2GB``: 12 layers, n_embd 1024, 2.2 GB) trains with one thread,
batches of 2 × 32 tokens, ``save_steps`` steps between saves, ``--saves`` saves per run. Each run is a
fresh process; a round runs, in a random order:

- ``transformers``: transformers.Trainer, saving (synchronously, as it always does);
- ``hf_lightning``: hf_lightning.Trainer, saving synchronously (crash-safe: staging folder, checksums
  taken while writing, rename; the flush to disk follows behind: deferred durability, the default);
- ``hf_lightning durable``: the same with ``HF_LIGHTNING_DEFERRED_DURABILITY=0`` (every file flushed before
  the rename; no resume is timed for it: its files are the same);
- ``hf_lightning background``: the same with ``callbacks=[BackgroundCheckpointing()]``;
- ``... no save``: each library with ``save_strategy="no"`` (the run time that saving adds is measured
  against it);

Every process starts with no dirty pages: before it starts, ``sync`` writes to the disk, untimed, what
the process before it left in the page cache (transformers' saves never flush, and the kernel would
otherwise write their bytes back during the next run's saves).

Each process first imports what ``train()`` and ``save_pretrained`` import on first use (the engine;
accelerate's unwrapping, which imports DeepSpeed when it is installed), so saves and resumes are timed
without imports (start-up is ``benchmarks/bench_startup.py``'s). Then one resume per saving library: a
fresh process calls ``train(resume_from_checkpoint=True)`` on that run's output and stops after the
first step; then the check a resume makes before it loads anything (every file of hf_lightning's newest
checkpoint against its manifest, from the page cache, best of 3). The speed of the manifest's checksum
(XXH3-128) against SHA-256 is printed first.

The **plain durable write**: in every round, after the runs, as many bytes as one of hf_lightning's
checkpoints holds are written into the same folder in 4 MiB blocks, timed to the end of the ``write``
calls (the bytes in the page cache: what a save that never flushes costs, such as transformers') and to
the end of one ``fdatasync`` after them (the bytes on the disk: what a durable save costs that does not
overlap its writing with the disk's). Then **writing new memory**: 1 GiB newly mapped, every page written
once, and the same again just after it was freed (GB/s). On a virtual machine the first is the speed at
which the host backs the guest's pages; it changes from minute to minute, and a save's page cache, a
snapshot's copy and a resume's tensors are such pages: it is printed to read the 2 GB figures by.

Reported per library (medians over rounds, and the median of the per-round ratios to transformers):

- **save s**: seconds inside ``_save_checkpoint`` per save, the first save apart; for a background save
  this is the **stall**: what the training step waits for (the copy of the state to host memory);
- **run added per save**: (run time − the same library's run without saves) / saves: what saving costs
  the run in the end (for a background save: the stall plus the CPU the writer took from training);
- **resume s**: from ``train(resume_from_checkpoint=True)`` to the end of the first step;
- **peak RSS**: the process's peak resident set (MiB), saving run and resume run.

    python benchmarks/bench_checkpoint.py [--size 400MB|2GB] [--rounds 3] [--saves 3] [--save-steps 10]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = {"400MB": dict(n_layer=6, n_embd=512), "2GB": dict(n_layer=12, n_embd=1024)}
MARK = "@@bench "
RUNS = {
    "transformers": ("transformers", "save"),
    "hf_lightning": ("hf_lightning", "save"),
    "hf_lightning durable": ("hf_lightning", "durable"),
    "hf_lightning background": ("hf_lightning", "background"),
    "transformers no save": ("transformers", "none"),
    "hf_lightning no save": ("hf_lightning", "none"),
}


def _report(**values: object) -> None:
    print(MARK + json.dumps(values), flush=True)


def _model(size: str):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_head=8, vocab_size=32000, n_positions=64, bos_token_id=0, eos_token_id=0, **SIZES[size]
    )
    return GPT2LMHeadModel(config)


def _trainer(library: str, size: str, out: str, max_steps: int, save_steps: int, mode: str):
    import torch

    lib = __import__(library)
    g = torch.Generator().manual_seed(0)
    data = [
        {"input_ids": (r := torch.randint(0, 32000, (32,), generator=g)), "labels": r} for _ in range(256)
    ]
    args = lib.TrainingArguments(
        output_dir=out, per_device_train_batch_size=2, max_steps=max_steps, learning_rate=1e-4,
        save_strategy="no" if mode == "none" else "steps", save_steps=save_steps, logging_steps=10_000,
        report_to="none", disable_tqdm=True, use_cpu=True, lr_scheduler_type="constant",
    )  # fmt: skip
    callbacks = [lib.BackgroundCheckpointing()] if mode == "background" else []
    model = _model(size)
    _warm_up(library, model)
    return lib.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks), lib


def _warm_up(library: str, model) -> None:
    """Import what train() and save_pretrained import on first use (transformers' Trainer imports it at
    start-up; hf_lightning at its first train() and save), so that saves and resumes are timed alone."""
    from transformers.modeling_utils import unwrap_model

    unwrap_model(model)  # accelerate's extract_model_from_parallel: imports deepspeed when installed
    if library == "hf_lightning":
        import hf_lightning.adapters.callbacks.loop_driver  # noqa: F401
        import hf_lightning.adapters.fit  # noqa: F401  (lightning)
    else:
        import transformers.trainer  # noqa: F401


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def serve_save(library: str, mode: str, size: str, out: str, saves: int, save_steps: int) -> None:
    """Child: train ``saves * save_steps`` steps, timing every ``_save_checkpoint`` call."""
    os.environ["HF_LIGHTNING_DEFERRED_DURABILITY"] = "0" if mode == "durable" else "1"
    trainer, _ = _trainer(library, size, out, saves * save_steps, save_steps, mode)
    seconds: list[float] = []
    original = trainer._save_checkpoint

    def timed(*args, **kwargs):
        started = time.perf_counter()
        original(*args, **kwargs)
        seconds.append(time.perf_counter() - started)

    trainer._save_checkpoint = timed
    started = time.perf_counter()
    trainer.train()
    _report(run=time.perf_counter() - started, saves=seconds, rss=_peak_rss_mib())


def serve_resume(library: str, size: str, out: str, saves: int, save_steps: int) -> None:
    """Child: resume the newest checkpoint in ``out`` and stop after one step."""
    trainer, lib = _trainer(library, size, out, saves * save_steps + 1, save_steps, "none")
    ended: list[float] = []

    class FirstStep(lib.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ended.append(time.perf_counter())
            control.should_training_stop = True

    trainer.add_callback(FirstStep())
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=True)
    _report(resume=ended[0] - started, resume_rss=_peak_rss_mib())


def serve_verify(out: str) -> None:
    """Child: the check a resume makes before loading (every file against the manifest), best of 3."""
    from hf_lightning.checkpoint.verify import content_problem

    folder = os.path.join(out, _newest(out))
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        problem = content_problem(folder)
        best = min(best, time.perf_counter() - started)
        if problem is not None:
            raise RuntimeError(problem)
    _report(verify=best)


def _child(*argv: str) -> dict:
    os.sync()  # untimed: no run pays for the dirty pages the run before it left (transformers' saves)
    done = subprocess.run(
        [sys.executable, __file__, *argv], capture_output=True, text=True,
        env={**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-4000:]}")


def run_round(cli: argparse.Namespace, order: random.Random) -> dict[str, dict]:
    """Every run of RUNS in a random order, then the resumes in a random order."""
    results, folders = {}, {}
    common = [cli.size, str(cli.saves), str(cli.save_steps)]
    for name in order.sample(list(RUNS), len(RUNS)):
        library, mode = RUNS[name]
        folders[name] = tempfile.mkdtemp(prefix="bench_ckpt_", dir=cli.tmp)
        results[name] = _child("--serve-save", library, mode, folders[name], *common)
        print(f"  {name}: {json.dumps(results[name])}", file=sys.stderr, flush=True)
    for name in order.sample(["transformers", "hf_lightning", "hf_lightning background"], 3):
        results[name].update(_child("--serve-resume", RUNS[name][0], folders[name], *common))
    results["hf_lightning"].update(_child("--serve-verify", folders["hf_lightning"]))
    results["disk"] = disk_floor(_checkpoint_bytes(folders["hf_lightning"]), folders["hf_lightning"])
    results["memory"] = memory_touch()
    for folder in folders.values():
        shutil.rmtree(folder, ignore_errors=True)
    return results


def _newest(out: str) -> str:
    """The name of the newest ``checkpoint-N`` in ``out``."""
    return max(
        (n for n in os.listdir(out) if n.startswith("checkpoint-")), key=lambda n: int(n.split("-")[1])
    )


def _checkpoint_bytes(out: str) -> int:
    """The bytes of the newest ``checkpoint-N`` in ``out``."""
    folder = os.path.join(out, _newest(out))
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(folder) for f in fs)


def disk_floor(size: int, folder: str) -> dict:
    """Seconds to write ``size`` bytes into ``folder``: into the page cache, and until one fdatasync ends."""
    block = os.urandom(4 << 20)
    path = os.path.join(folder, "disk-floor.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        started = time.perf_counter()
        for _ in range(-(-size // len(block))):
            os.write(fd, block)
        cached = time.perf_counter() - started
        (getattr(os, "fdatasync", None) or os.fsync)(fd)
        durable = time.perf_counter() - started
    finally:
        os.close(fd)
        os.remove(path)
    return {"bytes": size, "page_cache": cached, "durable": durable}


def memory_touch(mib: int = 1024) -> dict:
    """GB/s of writing every page of ``mib`` MiB of newly allocated memory once, then of memory that was
    just freed and is allocated again. On a virtual machine the first is the speed at which the host backs
    the guest's pages, and it moves from minute to minute: the page cache a save writes into, and a
    snapshot's or a resume's new tensors, are such pages."""
    import ctypes
    import mmap

    speeds = {}
    for name in ("new", "again"):
        block = mmap.mmap(-1, mib << 20)
        address = ctypes.addressof(ctypes.c_char.from_buffer(block))
        started = time.perf_counter()
        ctypes.memset(address, 1, mib << 20)
        speeds[name] = (mib << 20) / (time.perf_counter() - started) / 1e9
        block.close()
    return speeds


def _later_saves(result: dict) -> float:
    return statistics.median(result["saves"][1:] or result["saves"])


def summarize(rounds: list[dict[str, dict]], saves: int) -> list[str]:
    """Table rows: medians over rounds and medians of the per-round ratios to transformers."""
    rows = []
    for name in ("transformers", "hf_lightning", "hf_lightning durable", "hf_lightning background"):
        if name not in rounds[0]:
            continue
        library = RUNS[name][0]
        save = [_later_saves(r[name]) for r in rounds]
        first = [r[name]["saves"][0] for r in rounds]
        added = [(r[name]["run"] - r[f"{library} no save"]["run"]) / saves for r in rounds]
        resume = [r[name].get("resume", float("nan")) for r in rounds]

        def ratio(values: list[float], of: str) -> float:
            theirs = {"save": [_later_saves(r["transformers"]) for r in rounds],
                      "added": [(r["transformers"]["run"] - r["transformers no save"]["run"]) / saves
                                for r in rounds],
                      "resume": [r["transformers"]["resume"] for r in rounds]}[of]  # fmt: skip
            return statistics.median(a / b for a, b in zip(values, theirs))

        rows.append(
            f"| {name} | {statistics.median(save):.2f} | {ratio(save, 'save'):.2f}x | "
            f"{statistics.median(first):.2f} | {statistics.median(added):.2f} | {ratio(added, 'added'):.2f}x | "
            f"{statistics.median(resume):.2f} | {ratio(resume, 'resume'):.2f}x | "
            f"{statistics.median(r[name]['rss'] for r in rounds):.0f} | "
            f"{statistics.median(r[name].get('resume_rss', float('nan')) for r in rounds):.0f} |"
        )
    return rows


def disk_summary(rounds: list[dict[str, dict]]) -> str:
    """The plain durable write against each library's synchronous save (medians over rounds)."""
    disk = [r["disk"] for r in rounds]
    durable = statistics.median(d["durable"] for d in disk)
    ours = statistics.median(_later_saves(r["hf_lightning"]) / r["disk"]["durable"] for r in rounds)
    theirs = statistics.median(_later_saves(r["transformers"]) / r["disk"]["durable"] for r in rounds)
    return (
        f"Plain durable write: {disk[0]['bytes'] / 1e6:.0f} MB written in {statistics.median(d['page_cache'] for d in disk):.2f} s "
        f"into the page cache, {durable:.2f} s until durable (one fdatasync); synchronous save / plain durable write: "
        f"hf_lightning {ours:.2f}x, transformers {theirs:.2f}x; a resume's check of the checkpoint against its "
        f"manifest (from the page cache): {statistics.median(r['hf_lightning']['verify'] for r in rounds):.3f} s; "
        "writing new memory once (1 GiB, per round): "
        + ", ".join(f"{r['memory']['new']:.2f}" for r in rounds)
        + " GB/s (just freed: "
        + ", ".join(f"{r['memory']['again']:.2f}" for r in rounds)
        + " GB/s)"
    )


def hash_speed(mib: int = 256) -> str:
    """GB/s of the manifest's digest (XXH3-128) and of SHA-256 (format 1) on one core, best of 3."""
    import hashlib

    import xxhash

    data = memoryview(os.urandom(mib * 1024 * 1024))
    speeds = {}
    for name, make in (("XXH3-128", xxhash.xxh3_128), ("SHA-256", hashlib.sha256)):
        best = float("inf")
        for _ in range(3):
            digest, started = make(), time.perf_counter()
            for offset in range(0, len(data), 4 << 20):
                digest.update(data[offset : offset + (4 << 20)])
            digest.hexdigest()
            best = min(best, time.perf_counter() - started)
        speeds[name] = len(data) / best / 1e9
    ratio = speeds["XXH3-128"] / speeds["SHA-256"]
    return ", ".join(f"{k} {v:.2f} GB/s" for k, v in speeds.items()) + f" ({ratio:.1f}x)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=sorted(SIZES), default="400MB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--saves", type=int, default=3)
    parser.add_argument("--save-steps", type=int, default=10, help="steps between saves")
    parser.add_argument("--seed", type=int, default=0, help="seeds the order of the runs")
    parser.add_argument(
        "--tmp", default=None, help="where the checkpoints are written (default: the system's)"
    )
    parser.add_argument("--json", help="also write every run's figures here")
    parser.add_argument("--serve-save", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--serve-resume", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--serve-verify", help=argparse.SUPPRESS)
    cli = parser.parse_args()
    if cli.serve_save:
        library, mode, out, size, saves, steps = cli.serve_save
        return serve_save(library, mode, size, out, int(saves), int(steps))
    if cli.serve_resume:
        library, out, size, saves, steps = cli.serve_resume
        return serve_resume(library, size, out, int(saves), int(steps))
    if cli.serve_verify:
        return serve_verify(cli.serve_verify)
    order = random.Random(cli.seed)
    rounds = [run_round(cli, order) for _ in range(cli.rounds)]
    print(f"Checkpoint {cli.size}, {cli.rounds} rounds, {cli.saves} saves every {cli.save_steps} steps; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    print(f"Checksums on one core, {hash_speed()}")
    print("| library | save s (stall) | vs transformers | first save s | run added per save s | vs transformers "
          "| resume s | vs transformers | peak RSS saving (MiB) | peak RSS resuming (MiB) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in summarize(rounds, cli.saves):
        print(row)
    print(disk_summary(rounds))
    if cli.json:
        with open(cli.json, "w") as handle:
            json.dump(rounds, handle, indent=1)


if __name__ == "__main__":
    main()
