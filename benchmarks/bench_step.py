"""Seconds per optimizer step: hf_lightning.Trainer vs a raw torch loop vs plain Lightning vs transformers.

Workloads (one thread, progress bars and saving off):
  W1  tiny GPT-2: 2 layers, n_embd 64, seq 32, batch 8 (GA 1 and GA 4)
  W2  GPT-2: 4 layers, n_embd 256, seq 128, batch 8
  W0  (only when named) a model of 4 weights whose step costs ~0.3 ms: what is left is each framework's
      own cost per optimizer step, in microseconds over the raw loop (GA 1 and GA 4)

Each framework trains in a process of its own (so one framework's process-wide settings, such as
hf_lightning's allocator tuning, never help another's). The machine's speed drifts by tens of percent
within seconds, so the processes take turns: in every *cycle* each process, in a fresh random order,
runs one block of steps (``--block``) while the others wait, paused between two
optimizer steps. A block's time is the median step interval within it; the frameworks' blocks of one
cycle run within a second of each other (W2: a few seconds; half the block, a third of the cycles),
and their ratios are the paired figures:

- ratio to raw: median over all cycles of (framework block / raw-loop block of the same cycle), with
  the 10th-90th percentile range of those ratios;
- vs transformers: median over cycles of (framework block / transformers.Trainer block), and the
  share of cycles in which the framework's block was faster than transformers';
- start-up: process start to the end of the first optimizer step, each process started alone.

    python benchmarks/bench_step.py [--rounds 3] [--cycles 60] [--block 5] [--seed 0] [--json runs.json]

``--baseline REF`` adds a fifth process: hf_lightning as of the git commit ``REF`` (its sources taken
with ``git archive`` into a temporary folder that its process imports first), so a change to
hf_lightning is compared with the code before it in the same cycles (the "vs baseline" column:
median over cycles of this block / the baseline's block).

``--floor`` adds "Lightning loop, raw step": Lightning's fit loop (manual optimization, one batch per optimizer
step, as hf_lightning drives it) around exactly the raw loop's step. Its row is the least any trainer built on
Lightning's loop costs over the raw loop: the floor under hf_lightning's row.

``--speedups-off NAMES`` adds a process of hf_lightning with those speed tricks of
``hf_lightning/adapters/speedups.py`` turned off (``setattr,signature,backward``, or ``all``): its row beside
hf_lightning's is what the tricks save.
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

import torch

torch.set_num_threads(1)

WORKLOADS = {
    "W1 GA1": dict(n_layer=2, n_embd=64, seq=32, batch=8, ga=1),
    "W1 GA4": dict(n_layer=2, n_embd=64, seq=32, batch=8, ga=4),
    "W2": dict(n_layer=4, n_embd=256, seq=128, batch=8, ga=1),
    "W0 GA1": dict(null=True, seq=4, batch=2, ga=1),
    "W0 GA4": dict(null=True, seq=4, batch=2, ga=4),
}
DEFAULT_WORKLOADS = ("W1 GA1", "W1 GA4", "W2")
FLOOR = "Lightning loop, raw step"
WARMUP_STEPS = 3
MARK = "@@bench "
BASELINE = "hf_lightning.Trainer (baseline)"
BASELINE_TREE_ENV = "HF_LIGHTNING_BENCH_BASELINE_TREE"
SPEEDUPS_OFF = "hf_lightning.Trainer (speedups off)"
SPEEDUPS_OFF_ENV = "HF_LIGHTNING_SPEEDUPS_OFF"  # read by hf_lightning/adapters/speedups.py at import
_CHILD_ENV: dict[str, dict[str, str]] = {}
"""Extra environment of a framework's process (the baseline's tree, the speed tricks turned off)."""


class NullModel(torch.nn.Module):
    """W0's model: 4 weights, a loss divided by ``num_items_in_batch`` as a causal LM's is."""

    def __init__(self) -> None:
        from transformers.modeling_outputs import CausalLMOutput

        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(4))
        self.output_class = CausalLMOutput  # imported once, not in every forward

    def forward(self, input_ids, labels=None, num_items_in_batch=None, **kwargs):
        total = (self.weight * input_ids[:, :4].float()).sum()
        count = num_items_in_batch if num_items_in_batch is not None else input_ids.numel()
        return self.output_class(loss=total / count)


def make_model(w):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    if w.get("null"):
        return NullModel()
    cfg = GPT2Config(
        n_layer=w["n_layer"],
        n_embd=w["n_embd"],
        n_head=4,
        vocab_size=256,
        n_positions=w["seq"],
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(cfg)


def make_data(w, n_steps):
    g = torch.Generator().manual_seed(0)
    n = w["batch"] * w["ga"] * n_steps
    ids = torch.randint(0, 256, (n, w["seq"]), generator=g)
    return [{"input_ids": r, "labels": r.clone()} for r in ids]


class Pacer:
    """The child's side of the turn-taking: call ``step_end()`` at the end of every optimizer step.

    After the warm-up steps it reports the end time of the first step and waits for its turn; each turn
    runs ``block`` steps and reports their median step interval (the first interval starts when the
    turn is given), then waits again. Messages go to stdout behind ``MARK``; turns come on stdin.
    """

    def __init__(self, block: int, blocks: int) -> None:
        self.block, self.blocks = block, blocks
        self.count = 0
        self.first_step_end = 0.0
        self.times: list[float] = []
        self.done_blocks = 0

    @property
    def total_steps(self) -> int:
        return WARMUP_STEPS + self.block * self.blocks

    def _send(self, **msg: float) -> None:
        sys.stdout.write(MARK + json.dumps(msg) + "\n")
        sys.stdout.flush()

    def _wait_turn(self) -> None:
        sys.stdin.readline()
        self.times = [time.perf_counter()]

    def step_end(self) -> None:
        now = time.perf_counter()
        self.count += 1
        if self.count == 1:
            self.first_step_end = time.time()
        if self.count == WARMUP_STEPS:
            self._send(first_step_end=self.first_step_end)
            self._wait_turn()
        elif self.count > WARMUP_STEPS:
            self.times.append(now)
            if len(self.times) == self.block + 1:
                self.done_blocks += 1
                self._send(step=statistics.median(b - a for a, b in zip(self.times, self.times[1:])))
                if self.done_blocks < self.blocks:
                    self._wait_turn()


def raw_step(model, opt, batches):
    """One optimizer step of the raw loop: the work every framework's step does."""
    n_items = sum((b["labels"][:, 1:] != -100).sum() for b in batches)
    for b in batches:
        loss = model(**b, num_items_in_batch=n_items).loss
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()


def run_raw(w, pacer):
    model = make_model(w)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)  # the Trainers' default optim
    it = iter(_loader(w, pacer))
    for _ in range(pacer.total_steps):
        raw_step(model, opt, [next(it) for _ in range(w["ga"])])
        pacer.step_end()


class _Windows:
    """The loader's batches in windows of ``ga``: one Lightning batch per optimizer step.

    hf_lightning's ``AccumulationWindows`` does this too; the floor keeps hf_lightning's code (and its imports) out
    of its process, so that its row is Lightning's loop and the raw step alone."""

    def __init__(self, loader, ga):
        self.loader, self.ga = loader, ga

    def __len__(self):
        return len(self.loader) // self.ga

    def __iter__(self):
        it = iter(self.loader)
        for _ in range(len(self)):
            yield [next(it) for _ in range(self.ga)]


def run_lightning_floor(w, pacer):
    """Lightning's loop (manual optimization) around exactly the raw loop's step (the optimizer Lightning's
    wrapper, whose ``step()`` Lightning counts towards ``max_steps``)."""
    import lightning as L

    class Floor(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.model = make_model(w)

        def training_step(self, window, idx):
            raw_step(self.model, self.optimizers(), window)  # Lightning's optimizer: it counts the steps
            pacer.step_end()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3, fused=True)

    _lightning_fit(Floor(), _Windows(_loader(w, pacer), w["ga"]), pacer)


def _loader(w, pacer):
    return torch.utils.data.DataLoader(make_data(w, pacer.total_steps), batch_size=w["batch"], shuffle=True)


def _lightning_fit(module, data, pacer, **trainer_kwargs):
    """A quiet Lightning fit of ``pacer.total_steps`` optimizer steps on the CPU."""
    import lightning as L

    trainer = L.Trainer(
        max_steps=pacer.total_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        **trainer_kwargs,
    )
    trainer.fit(module, data)


def _hf_style(lib, w, pacer):
    class Pace(lib.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            pacer.step_end()

    steps = pacer.total_steps
    args = lib.TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="bench_step_"),
        per_device_train_batch_size=w["batch"],
        gradient_accumulation_steps=w["ga"],
        max_steps=steps,
        learning_rate=1e-3,
        logging_steps=10_000,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        lr_scheduler_type="constant",
    )
    trainer = lib.Trainer(
        model=make_model(w), args=args, train_dataset=make_data(w, steps), callbacks=[Pace()]
    )
    trainer.train()


def run_transformers(w, pacer):
    import transformers

    _hf_style(transformers, w, pacer)


def run_ours(w, pacer):
    import hf_lightning

    _hf_style(hf_lightning, w, pacer)


def run_lightning(w, pacer):
    import lightning as L

    class Plain(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = make_model(w)

        def training_step(self, batch, idx):
            return self.model(**batch).loss

        def on_train_batch_end(self, *a):
            if self.trainer.fit_loop._should_accumulate() is False:
                pacer.step_end()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3, fused=True)

    _lightning_fit(Plain(), _loader(w, pacer), pacer, accumulate_grad_batches=w["ga"], gradient_clip_val=1.0)


RUNNERS = {
    "raw torch": run_raw,
    "plain Lightning": run_lightning,
    "transformers.Trainer": run_transformers,
    "hf_lightning.Trainer": run_ours,
}


def serve(framework: str, workload: str, block: int, blocks: int) -> None:
    """Child process: train with turns taken from stdin."""
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    if framework == BASELINE:  # import the baseline's hf_lightning before the installed one
        sys.path.insert(0, os.environ[BASELINE_TREE_ENV])
    if framework in (BASELINE, SPEEDUPS_OFF):
        RUNNERS[framework] = run_ours
    if framework == FLOOR:
        RUNNERS[framework] = run_lightning_floor
    RUNNERS[framework](WORKLOADS[workload], Pacer(block, blocks))


class Child:
    """One framework's process, seen from the parent."""

    def __init__(
        self, framework: str, workload: str, block: int, blocks: int, baseline_env: dict | None = None
    ) -> None:
        self.framework = framework
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.started = time.time()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", framework, workload, str(block), str(blocks)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env={**os.environ, "TQDM_DISABLE": "1", **(baseline_env or {})},
        )

    def read(self) -> dict[str, float]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK) :])
        self.stderr.seek(0)
        raise RuntimeError(f"{self.framework} exited early:\n{self.stderr.read()[-4000:]}")

    def turn(self) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self.read()["step"]

    def finish(self) -> None:
        if self.proc.wait(timeout=600) != 0:
            self.stderr.seek(0)
            raise RuntimeError(f"{self.framework} failed:\n{self.stderr.read()[-4000:]}")


def run_round(workload: str, block: int, cycles: int, order: random.Random) -> dict[str, dict]:
    """Start the frameworks one after another, then let them take turns for ``cycles`` cycles."""
    children, startup = {}, {}
    for fw in order.sample(list(RUNNERS), len(RUNNERS)):
        child = Child(fw, workload, block, cycles, _CHILD_ENV.get(fw))
        startup[fw] = child.read()["first_step_end"] - child.started
        children[fw] = child
    steps: dict[str, list[float]] = {fw: [] for fw in RUNNERS}
    for cycle in range(cycles):
        for fw in order.sample(list(RUNNERS), len(RUNNERS)):
            steps[fw].append(children[fw].turn())
            if cycle == cycles - 1:  # its last turn: let it exit before the next one runs
                children[fw].finish()
    return {fw: {"startup": startup[fw], "steps": steps[fw]} for fw in RUNNERS}


def build_baseline_tree(ref: str, folder: str) -> str:
    """``hf_lightning`` as of commit ``ref``, laid out as an importable package under ``folder``."""
    import io
    import tarfile

    root = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
    ).stdout.strip()
    data = subprocess.run(
        ["git", "archive", ref, "src/hf_lightning", "adapters"], cwd=root, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(folder, filter="data")
    package = os.path.join(folder, "hf_lightning")
    os.rename(os.path.join(folder, "src", "hf_lightning"), package)
    os.rename(os.path.join(folder, "adapters"), os.path.join(package, "adapters"))
    return folder


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def summarize(name: str, rounds: list[dict[str, dict]]) -> list[str]:
    """Table rows for one workload from every round's paired blocks."""
    rows = []
    for fw in RUNNERS:
        mine = [s for r in rounds for s in r[fw]["steps"]]
        raw = [s for r in rounds for s in r["raw torch"]["steps"]]
        hf = [s for r in rounds for s in r["transformers.Trainer"]["steps"]]
        ratios = [a / b for a, b in zip(mine, raw)]
        vs_hf = [a / b for a, b in zip(mine, hf)]
        faster = sum(a < b for a, b in zip(mine, hf)) / len(mine)
        startup = statistics.median(r[fw]["startup"] for r in rounds)
        over_raw = statistics.median(a - b for a, b in zip(mine, raw)) * 1e6
        row = (
            f"| {name} | {fw} | {statistics.median(mine):.4f} | {over_raw:.0f} | {statistics.median(ratios):.3f} | "
            f"{_percentile(ratios, 0.1):.2f}–{_percentile(ratios, 0.9):.2f} | "
            f"{statistics.median(vs_hf):.3f} | {100 * faster:.0f} % | {startup:.2f} |"
        )
        if BASELINE in RUNNERS:
            base = [s for r in rounds for s in r[BASELINE]["steps"]]
            row += f" {statistics.median(a / b for a, b in zip(mine, base)):.3f} |"
        rows.append(row)
    return rows


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
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per framework and workload")
    parser.add_argument("--cycles", type=int, default=60, help="turns per process in a round (W2: a third)")
    parser.add_argument(
        "--block", type=int, default=5, help="optimizer steps per turn (W2: half, at least 2)"
    )
    parser.add_argument(
        "--workloads", nargs="*", default=list(DEFAULT_WORKLOADS), help=f"of {list(WORKLOADS)}"
    )
    parser.add_argument("--floor", action="store_true", help=f'also run "{FLOOR}"')
    parser.add_argument("--seed", type=int, default=0, help="seeds the order of the frameworks")
    parser.add_argument("--json", help="also write every block's s/step and every start-up here")
    parser.add_argument("--baseline", metavar="REF", help="also run hf_lightning as of this git commit")
    parser.add_argument(
        "--speedups-off", metavar="NAMES", help="also run hf_lightning with these speed tricks off (or all)"
    )
    parser.add_argument(
        "--serve", nargs=4, metavar=("FRAMEWORK", "WORKLOAD", "BLOCK", "BLOCKS"), help=argparse.SUPPRESS
    )
    cli = parser.parse_args()
    if cli.serve:
        serve(cli.serve[0], cli.serve[1], int(cli.serve[2]), int(cli.serve[3]))
        return
    _compile_bytecode()
    order = random.Random(cli.seed)
    header = (
        "| workload | framework | s/step (median) | µs/step over raw (median of cycles) "
        "| ratio to raw (median of cycles) | ratio p10–p90 "
        "| vs transformers (median of cycles) | cycles faster than transformers | start-up s |"
    )
    rule = "|---|---|---:|---:|---:|---:|---:|---:|---:|"
    if cli.baseline:
        tree = build_baseline_tree(cli.baseline, tempfile.mkdtemp(prefix="bench-baseline-"))
        _CHILD_ENV[BASELINE] = {BASELINE_TREE_ENV: tree}
        RUNNERS[BASELINE] = run_ours
        header, rule = header + " vs baseline |", rule + "---:|"
    if cli.floor:
        RUNNERS[FLOOR] = run_lightning_floor
    if cli.speedups_off:
        names = "setattr,signature,backward" if cli.speedups_off == "all" else cli.speedups_off
        _CHILD_ENV[SPEEDUPS_OFF] = {SPEEDUPS_OFF_ENV: names}
        RUNNERS[SPEEDUPS_OFF] = run_ours
    print(header)
    print(rule)
    record = {}
    for name in cli.workloads:
        if name.startswith("W0"):  # steps of ~0.3-1.5 ms: longer turns
            block, cycles = cli.block * 20, cli.cycles
        elif name.startswith("W1"):
            block, cycles = cli.block, cli.cycles
        else:
            block, cycles = max(cli.block // 2, 2), max(cli.cycles // 3, 5)
        record[name] = [run_round(name, block, cycles, order) for _ in range(cli.rounds)]
        for row in summarize(name, record[name]):
            print(row, flush=True)
    if cli.json:
        with open(cli.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
