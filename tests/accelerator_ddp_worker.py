"""One rank of ``tests/adapters/test_accelerator_ddp.py``: ``python accelerator_ddp_worker.py OUT``.

Asks the same questions of three accelerators on this rank and writes the answers to
``OUT/rank{RANK}.json``: hf_lightning's ``trainer.accelerator`` before any training (its own process group,
from the launcher's variables), accelerate's ``Accelerator`` as transformers' Trainer builds it, and hf_lightning's accelerator inside
``train()`` (asked from an overridden ``training_step``, so through the running Lightning strategy).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader

OUT = Path(sys.argv[1])
RANK = int(os.environ["RANK"])


def plain(value):
    """A JSON-able account of ``value``: tensors as (dtype, shape, values), containers walked."""
    if isinstance(value, torch.Tensor):
        return {"dtype": str(value.dtype), "shape": list(value.shape), "values": value.tolist()}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [plain(v) for v in value]]
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return str(value)


def questions(acc, tag: str) -> dict:
    """The answers of ``acc`` (``tag`` names files it writes)."""
    r = acc.process_index
    answers = {
        name: plain(getattr(acc, name))
        for name in ("num_processes", "process_index", "local_process_index", "is_main_process",
                     "is_local_main_process", "is_last_process", "use_distributed", "distributed_type", "device")
    }  # fmt: skip
    answers["state.backend"] = acc.state.backend
    answers["state.num_processes"] = acc.state.num_processes
    answers["gather.0d"] = plain(acc.gather(torch.tensor(float(r))))
    answers["gather.2d"] = plain(acc.gather(torch.arange(6).reshape(2, 3) + 10 * r))
    answers["gather.nested"] = plain(acc.gather({"a": torch.tensor([r, r]), "b": [torch.tensor(1.0 * r)]}))
    answers["gather_for_metrics.tensor"] = plain(acc.gather_for_metrics(torch.tensor([r + 0.5])))
    answers["gather_for_metrics.objects"] = plain(acc.gather_for_metrics([f"rank{r}", {"r": r}]))
    answers["gather_for_metrics.use_gather_object"] = plain(
        acc.gather_for_metrics([r], use_gather_object=True)
    )
    for reduction in ("sum", "mean", "max"):
        answers[f"reduce.{reduction}"] = plain(
            acc.reduce(torch.tensor([r + 1.0, 2.0 * r]), reduction=reduction)
        )
    answers["pad"] = plain(acc.pad_across_processes(torch.ones(r + 1, 2) * (r + 1), dim=0, pad_index=-1))
    answers["pad.first"] = plain(acc.pad_across_processes(torch.ones(2, r + 2), dim=1, pad_first=True))
    for padding in (False, True):
        for name, data in (("list", list(range(5))), ("tensor", torch.arange(5)), ("dict", {"k": [1, 2, 3]})):
            with acc.split_between_processes(data, apply_padding=padding) as share:
                answers[f"split.{name}.{padding}"] = plain(share)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        acc.print("printed by", tag)
    answers["print"] = printed.getvalue()
    answers["on_main_process"] = acc.on_main_process(lambda: "ran")()
    answers["on_last_process"] = acc.on_last_process(lambda: "ran")()
    marker = OUT / f"first-{tag}"
    with acc.main_process_first():
        if acc.is_main_process:
            marker.write_text("main was here")
        answers["main_process_first"] = marker.exists()
    acc.wait_for_everyone()
    acc.save({"w": torch.ones(1)}, OUT / f"saved-{tag}-rank{r}.pt")
    acc.wait_for_everyone()
    answers["save"] = sorted(p.name for p in OUT.glob(f"saved-{tag}-*"))
    for even in (True, False):
        acc.even_batches = even
        loader = acc.prepare(DataLoader(list(range(11)), batch_size=3))
        answers[f"prepare.even={even}"] = [b.tolist() for b in loader]
    acc.even_batches = True
    torch.manual_seed(3)
    shuffled = acc.prepare(DataLoader(list(range(12)), batch_size=2, shuffle=True))
    answers["prepare.shuffled"] = [[b.tolist() for b in shuffled] for _ in range(2)]
    return answers


def in_training(out: str) -> dict:
    """The answers of hf_lightning's accelerator asked inside ``train()``."""
    from hf_lightning import Trainer, TrainingArguments
    from tests.tiny import RegressionModel, regression_data

    found: dict = {}

    class Asking(Trainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            if not found:
                found.update(questions(self.accelerator, "fit"))
                found["in_fit"] = self.accelerator.module is not None
            return super().training_step(model, inputs, num_items_in_batch)

    args = TrainingArguments(out, use_cpu=True, report_to="none", max_steps=1, per_device_train_batch_size=4,
                             save_strategy="no", disable_tqdm=True)  # fmt: skip
    Asking(model=RegressionModel(), args=args, train_dataset=regression_data(16)).train()
    return found


if __name__ == "__main__":
    import transformers

    from hf_lightning import Trainer, TrainingArguments
    from tests.tiny import RegressionModel

    OUT.mkdir(parents=True, exist_ok=True)
    args = TrainingArguments(str(OUT / "run"), use_cpu=True, report_to="none")
    ours = Trainer(model=RegressionModel(), args=args).accelerator
    results = {"ours": questions(ours, "ours")}  # before accelerate: our accelerator starts the group
    # the oracle: accelerate's Accelerator as transformers' Trainer configures it (use_seedable_sampler, ...)
    hf_args = transformers.TrainingArguments(str(OUT / "hf"), use_cpu=True, report_to="none")
    theirs = transformers.Trainer(model=RegressionModel(), args=hf_args).accelerator
    results["accelerate"] = questions(theirs, "accelerate")
    results["fit"] = in_training(str(OUT / "fit"))
    (OUT / f"rank{RANK}.json").write_text(json.dumps(results), encoding="utf-8")
