"""Two processes (gloo): what TRL-style trainers meet under DDP is what transformers' Trainer gives them.

The test launches this file twice as a script; each process runs each scenario with transformers' Trainer and
with hf_lightning's, and saves what it got:

- ``pairs``: a collator that puts two rows per sample in the batch (chosen and rejected, as TRL's DPO and
  reward trainers do), so the loss is repeated over twice as many rows as the batch has samples; every full
  round is kept whole, as accelerate's ``gather_for_metrics`` keeps it (rank 1's losses were cut before).
- ``subclass_sampler``: a subclass's ``_get_eval_sampler`` (TRL's GRPO, RLOO), whose loader accelerate's
  ``prepare`` shards: its results are gathered from every rank with accelerate's rule for the last round.
- ``parallel_mode``: ``args.parallel_mode`` equals transformers' ``ParallelMode.DISTRIBUTED``, so transformers'
  own ``nested_gather`` (which TRL's OnlineDPO logs its loss with) gathers.
- ``unused_parameter``: a model that is not a ``PreTrainedModel`` (a ``PeftModel``, a plain module) with a
  parameter its forward never uses trains with ``ddp_find_unused_parameters`` unset and
  ``gradient_checkpointing=True`` (TRL's configs' default): transformers' rule looks for unused parameters for
  such a model whatever the checkpointing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from tests._ddp import run_ranks

pytestmark = [pytest.mark.ddp, pytest.mark.slow]

WORLD, SAMPLES, BATCH = 2, 9, 2  # 9 samples in rounds of 4: two full rounds and one of a single sample


class Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(3, 1)

    def forward(self, x, labels=None):
        out = self.lin(x).squeeze(-1)
        return {"loss": ((out - labels) ** 2).mean(), "logits": out}


class WithUnused(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.spare = torch.nn.Linear(3, 1)  # never called

    def gradient_checkpointing_enable(self, **kwargs):
        pass  # as a PeftModel forwards it to its base model


def train(lib, out_dir: str) -> dict:
    args = lib.TrainingArguments(out_dir, per_device_train_batch_size=BATCH, max_steps=3, logging_steps=1,
                                 report_to="none", use_cpu=True, disable_tqdm=True, save_strategy="no",
                                 remove_unused_columns=False, gradient_checkpointing=True)  # fmt: skip
    trainer = lib.Trainer(model=WithUnused(), args=args, train_dataset=data())
    trainer.train()
    return {"losses": [e["loss"] for e in trainer.state.log_history if "loss" in e]}


def data() -> list[dict]:
    g = torch.Generator().manual_seed(1)
    return [{"x": torch.randn(3, generator=g), "labels": float(i)} for i in range(SAMPLES)]


def pairs(features: list[dict]) -> dict:
    """Two rows per sample: the sample and a shifted copy (a preference pair's chosen and rejected)."""
    x = torch.stack([f["x"] for f in features])
    labels = torch.tensor([f["labels"] for f in features])
    return {"x": torch.cat([x, x + 1]), "labels": torch.cat([labels, labels + 0.5])}


def evaluate(lib_name: str, scenario: str, out_dir: str) -> dict:
    import transformers
    from torch.utils.data import SequentialSampler

    import hf_lightning

    lib = transformers if lib_name == "transformers" else hf_lightning

    class Custom(lib.Trainer):
        def _get_eval_sampler(self, eval_dataset):
            return SequentialSampler(eval_dataset)

    args = lib.TrainingArguments(out_dir, per_device_eval_batch_size=BATCH, report_to="none", use_cpu=True,
                                 disable_tqdm=True, remove_unused_columns=False)  # fmt: skip
    if scenario == "parallel_mode":
        from transformers.trainer_pt_utils import nested_gather
        from transformers.training_args import ParallelMode

        rank = torch.tensor([float(args.process_index)])
        return {
            "equal": args.parallel_mode == ParallelMode.DISTRIBUTED,
            "gathered": nested_gather(rank, args.parallel_mode),
        }
    if scenario == "unused_parameter":
        return train(lib, out_dir)
    cls = Custom if scenario == "subclass_sampler" else lib.Trainer
    collator = pairs if scenario == "pairs" else None
    output = cls(model=Regressor(), args=args, data_collator=collator).predict(data())
    return {"metrics": output.metrics, "predictions": torch.as_tensor(output.predictions)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("ddp_eval")
    run_ranks(__file__, [str(out)], world=WORLD, timeout=600)
    return {path.stem: torch.load(path, weights_only=False) for path in out.glob("*.pt")}


@pytest.mark.parametrize("scenario", ["pairs", "subclass_sampler"])
def test_gathered_loss_and_predictions_equal_transformers(runs, scenario):
    for rank in range(WORLD):
        ours, theirs = runs[f"ours_{scenario}_rank{rank}"], runs[f"transformers_{scenario}_rank{rank}"]
        assert ours["predictions"].shape == theirs["predictions"].shape
        torch.testing.assert_close(ours["predictions"], theirs["predictions"])
        assert ours["metrics"]["test_loss"] == pytest.approx(theirs["metrics"]["test_loss"], rel=1e-6)


def test_parallel_mode_is_transformers_distributed(runs):
    for rank in range(WORLD):
        ours, theirs = runs[f"ours_parallel_mode_rank{rank}"], runs[f"transformers_parallel_mode_rank{rank}"]
        assert ours["equal"] and theirs["equal"]
        assert ours["gathered"].tolist() == theirs["gathered"].tolist() == [0.0, 1.0]


def test_a_model_with_an_unused_parameter_trains_as_on_transformers(runs):
    ours, theirs = runs["ours_unused_parameter_rank0"], runs["transformers_unused_parameter_rank0"]
    assert len(ours["losses"]) == len(theirs["losses"]) == 3
    assert ours["losses"] == pytest.approx(theirs["losses"], rel=1e-5)


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    rank = int(os.environ["RANK"])
    for lib in ("transformers", "ours"):
        for name in ("pairs", "subclass_sampler", "parallel_mode", "unused_parameter"):
            result = evaluate(lib, name, str(target / f"{lib}_{name}"))
            torch.save(result, target / f"{lib}_{name}_rank{rank}.pt")
