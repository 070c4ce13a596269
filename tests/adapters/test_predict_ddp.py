"""predict() / evaluate() on 2 CPU processes (gloo): results gathered in dataset order, none lost or repeated.

The test launches this file twice as a script, with the launcher variables torchrun would set
(``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``, ...); each process builds a Trainer, predicts and writes
what it got. The test compares both processes with a single-process run of the same model.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests._ddp import run_ranks

#: (dataset size, per-device eval batch size): sizes not divisible by the world size, a last partial
#: batch, and a number of batches the ranks cannot share evenly.
CASES = [(7, 2), (9, 3), (5, 4)]

pytestmark = pytest.mark.ddp


class IndexModel(nn.Module):
    """Predicts its input ids (times a weight of 1): the predictions say which sample they came from."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(()))

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = input_ids.float().unsqueeze(-1) * self.weight
        out = {"logits": logits}
        if labels is not None:
            mask = labels.ne(-100)
            error = (logits.squeeze(-1) - labels.float()) ** 2
            out["loss"] = (error * mask).sum() / mask.sum()
        return out


def dataset(size: int) -> list[dict[str, torch.Tensor]]:
    """Sample i: ``1 + i % 3`` tokens all equal to i, labels i + 1 (ragged lengths across batches)."""
    return [
        {"input_ids": torch.full((1 + i % 3,), i), "labels": torch.full((1 + i % 3,), i + 1)}
        for i in range(size)
    ]


def collate(batch: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    length = max(len(item["input_ids"]) for item in batch)
    ids = torch.zeros(len(batch), length, dtype=torch.long)
    labels = torch.full((len(batch), length), -100)
    for row, item in enumerate(batch):
        ids[row, : len(item["input_ids"])] = item["input_ids"]
        labels[row, : len(item["labels"])] = item["labels"]
    return {"input_ids": ids, "labels": labels}


def run_cases(out_dir: str) -> dict[str, dict[str, np.ndarray]]:
    """predict() and evaluate() for every case in this process; the results by case name."""
    from hf_lightning import Trainer, TrainingArguments

    seen: list[int] = []

    def compute_metrics(eval_pred):
        seen.append(len(eval_pred.label_ids))
        return {"rows": float(len(eval_pred.label_ids))}

    args = TrainingArguments(out_dir, use_cpu=True, report_to="none", disable_tqdm=True)
    trainer = Trainer(model=IndexModel(), args=args, data_collator=collate, compute_metrics=compute_metrics)
    results = {}
    for size, batch_size in CASES:
        trainer.args.per_device_eval_batch_size = batch_size
        output = trainer.predict(dataset(size))
        metrics = trainer.evaluate(dataset(size))
        results[f"{size}_{batch_size}"] = {
            "predictions": output.predictions,
            "label_ids": output.label_ids,
            "test_loss": np.array(output.metrics["test_loss"]),
            "eval_rows": np.array(metrics["eval_rows"]),
        }
    trainer.args.per_device_eval_batch_size = 2
    trainer.args.eval_use_gather_object, trainer.args.eval_do_concat_batches = True, False
    steps = trainer.predict(dataset(7)).predictions
    results["objects"] = {"first_tokens": np.array([row[0, 0] for step in steps for row in step])}
    return results


def train_with_evaluation(out_dir: str) -> dict[str, np.ndarray]:
    """Train 4 steps, evaluating every 2; what each evaluation logged and what compute_metrics saw."""
    from hf_lightning import Trainer, TrainingArguments

    seen: list[np.ndarray] = []

    def compute_metrics(eval_pred):
        seen.append(eval_pred.predictions[:, 0, 0].round())
        return {"rows": float(len(eval_pred.label_ids))}

    args = TrainingArguments(
        out_dir,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        max_steps=4,
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="no",
        learning_rate=0.01,
    )
    trainer = Trainer(
        model=IndexModel(),
        args=args,
        data_collator=collate,
        train_dataset=dataset(8),
        eval_dataset=dataset(7),
        compute_metrics=compute_metrics,
    )
    trainer.train()
    entries = [
        (e["step"], e["eval_loss"], e["eval_rows"]) for e in trainer.state.log_history if "eval_loss" in e
    ]
    return {"entries": np.array(entries), "seen": np.stack(seen)}


def launch(out: Path, mode: str) -> None:
    """Run this file as 2 processes (``mode``: predict or train) writing into ``out``."""
    run_ranks(__file__, [str(out), mode], timeout=240)


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, np.ndarray]]]:
    """predict() and evaluate() on 2 processes; what each wrote."""
    out = tmp_path_factory.mktemp("ddp")
    launch(out, "predict")
    loaded = []
    for rank in range(2):
        with np.load(out / f"rank{rank}.npz") as data:
            flat = dict(data)
        loaded.append(
            {
                case: {k.split("/", 1)[1]: v for k, v in flat.items() if k.startswith(case + "/")}
                for case in json.loads((out / "cases.json").read_text())
            }
        )
    return loaded


@pytest.fixture(scope="module")
def single_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    """The same cases on one process."""
    return run_cases(str(tmp_path_factory.mktemp("single")))


@pytest.mark.parametrize(("size", "batch_size"), CASES)
def test_predictions_in_dataset_order(ddp_results, size: int, batch_size: int) -> None:
    """Every rank gets one prediction per sample, in dataset order, none repeated."""
    for rank_results in ddp_results:
        predictions = rank_results[f"{size}_{batch_size}"]["predictions"]
        assert predictions.shape[0] == size
        np.testing.assert_array_equal(predictions[:, 0, 0], np.arange(size))


@pytest.mark.parametrize(("size", "batch_size"), CASES)
def test_ddp_predict_equals_single_process(ddp_results, single_results, size: int, batch_size: int) -> None:
    """Predictions and labels equal those of one process wherever that one holds a real value (not -100).

    The repeated samples that fill a rank's last batch can make that batch longer, so a sample padded
    with -100 on one process may hold the collator's padding on two; real values never differ.
    """
    case = f"{size}_{batch_size}"
    for rank_results in ddp_results:
        for key in ("predictions", "label_ids"):
            ours, single = rank_results[case][key], single_results[case][key]
            assert ours.shape == single.shape
            real = single != -100
            np.testing.assert_array_equal(ours[real], single[real])


@pytest.mark.parametrize(("size", "batch_size"), [(9, 3)])
def test_ddp_loss_equals_single_process_with_full_batches(
    ddp_results, single_results, size, batch_size
) -> None:
    """With full batches the gathered per-sample losses give the single-process loss."""
    case = f"{size}_{batch_size}"
    for rank_results in ddp_results:
        np.testing.assert_allclose(
            rank_results[case]["test_loss"], single_results[case]["test_loss"], rtol=1e-6
        )


@pytest.mark.parametrize(("size", "batch_size"), CASES)
def test_ddp_compute_metrics_sees_every_sample(ddp_results, size: int, batch_size: int) -> None:
    """compute_metrics runs on every rank with all samples of the eval set."""
    for rank_results in ddp_results:
        assert rank_results[f"{size}_{batch_size}"]["eval_rows"] == size


def test_gather_object_keeps_dataset_order(ddp_results, single_results):
    """eval_use_gather_object: samples gathered as objects arrive in dataset order, none repeated."""
    for results in [*ddp_results, single_results]:
        np.testing.assert_array_equal(results["objects"]["first_tokens"], np.arange(7))


@pytest.mark.slow
def test_evaluation_during_ddp_training(tmp_path):
    """Evaluations during a 2-process fit: both ranks log the same metrics, computed on all 7 samples in order."""
    launch(tmp_path, "train")
    ranks = [dict(np.load(tmp_path / f"train{rank}.npz")) for rank in range(2)]
    np.testing.assert_array_equal(ranks[0]["entries"], ranks[1]["entries"])
    assert ranks[0]["entries"][:, 0].tolist() == [2, 4] and ranks[0]["entries"][:, 2].tolist() == [7, 7]
    for rank in ranks:
        np.testing.assert_array_equal(rank["seen"], np.tile(np.arange(7), (2, 1)))


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    if sys.argv[2] == "train":
        np.savez(target / f"train{rank}.npz", **train_with_evaluation(str(target / "output")))
        sys.exit(0)
    results = run_cases(str(target / "output"))
    np.savez(
        target / f"rank{rank}.npz",
        **{f"{case}/{key}": value for case, values in results.items() for key, value in values.items()},
    )
    if rank == 0:
        (target / "cases.json").write_text(json.dumps(sorted(results)))
