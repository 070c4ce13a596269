"""A Trainer subclass that overrides ``get_batch_samples`` or ``_get_num_items_in_batch`` (as completion-only
trainers do: mask the prompt, count only the completion) trains on the micro-batches and the item count it
returns, called once per optimizer step with transformers' arguments: same losses, weights and calls."""

from __future__ import annotations

import pytest
import torch
import transformers

import hf_lightning
from tests.parity._run import BASE_ARGS, assert_same_logs, assert_same_weights
from tests.tiny import causal_lm_data, tiny_llama

PROMPT = 3  # the first tokens of every row are the "prompt": masked by the completion-only override


def _completion_only(library, calls):
    class CompletionOnly(library.Trainer):
        def get_batch_samples(self, epoch_iterator, num_batches, device):
            batches = []
            for _ in range(num_batches):
                try:
                    batch = dict(next(epoch_iterator))
                except StopIteration:
                    break
                labels = batch["labels"].clone()
                labels[:, :PROMPT] = -100
                batches.append({**batch, "labels": labels})
            calls.append((num_batches, len(batches), str(device)))
            count = sum(int((b["labels"][:, 1:] != -100).sum()) for b in batches)
            return batches, torch.tensor(count, device=device)

    return CompletionOnly


def _doubled_count(library, calls):
    class DoubledCount(library.Trainer):
        def _get_num_items_in_batch(self, batch_samples, device):
            calls.append((len(batch_samples), len(batch_samples), str(device)))
            return super()._get_num_items_in_batch(batch_samples, device) * 2

    return DoubledCount


def _run(library, tmp_path, subclass, n: int = 14):
    calls: list[tuple[int, int, str]] = []
    args = library.TrainingArguments(
        output_dir=str(tmp_path / library.__name__),
        **BASE_ARGS,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=3,
        num_train_epochs=1,
        logging_steps=1,
        learning_rate=1e-3,
    )
    cls = subclass(library, calls)
    trainer = cls(model=tiny_llama(), args=args, train_dataset=causal_lm_data(n=n, vocab=128))
    trainer.train()
    return trainer, calls


_SUBCLASSES = (_completion_only, _doubled_count)


@pytest.mark.parametrize("subclass", _SUBCLASSES, ids=["get_batch_samples", "count"])
def test_an_overridden_batch_sampling_trains_as_in_transformers(tmp_path, subclass):
    hf, hf_calls = _run(transformers, tmp_path, subclass)
    ours, our_calls = _run(hf_lightning, tmp_path, subclass)
    assert our_calls == hf_calls
    assert [c[:2] for c in our_calls] == [(3, 3), (3, 3), (1, 1)]  # 7 micro-batches: a short last window
    assert_same_logs(hf, ours)
    assert_same_weights(hf, ours)
    plain, _ = _run(hf_lightning, tmp_path / "plain", lambda library, calls: library.Trainer)
    first_loss = [h["loss"] for h in ours.state.log_history if "loss" in h][0]
    assert first_loss != pytest.approx([h["loss"] for h in plain.state.log_history if "loss" in h][0])


def test_an_override_that_returns_no_micro_batch_is_refused_by_name(tmp_path):
    class Empty(hf_lightning.Trainer):
        def get_batch_samples(self, epoch_iterator, num_batches, device):
            return [], None

    args = hf_lightning.TrainingArguments(output_dir=str(tmp_path), **BASE_ARGS, max_steps=2)
    trainer = Empty(model=tiny_llama(), args=args, train_dataset=causal_lm_data(n=4, vocab=128))
    with pytest.raises(ValueError, match=r"Empty\.get_batch_samples returned no micro-batch"):
        trainer.train()


@pytest.mark.slow
@pytest.mark.ddp
def test_overridden_batch_sampling_on_two_processes_as_transformers(tmp_path):
    """On 2 processes (gloo) the overrides' counts are summed over the ranks (``average_tokens_across_devices``)
    as transformers sums them: the same logs on both ranks' run."""
    import json

    from tests._ddp import run_ranks

    for library in ("transformers", "hf_lightning"):
        run_ranks(__file__, [library, str(tmp_path)], world=2, timeout=600)
    theirs, ours = (
        json.loads((tmp_path / f"{name}.json").read_text()) for name in ("transformers", "hf_lightning")
    )
    assert ours["calls"] == theirs["calls"] and ours["calls"]
    for a, b in zip(theirs["logs"], ours["logs"], strict=True):
        assert b == pytest.approx(a, rel=1e-5)


if __name__ == "__main__":  # one rank of the two-process test: python this_file LIBRARY FOLDER
    import json
    import os
    import sys
    from pathlib import Path

    library = transformers if sys.argv[1] == "transformers" else hf_lightning
    out = Path(sys.argv[2])
    runs = [_run(library, out / f"{sys.argv[1]}-{i}", make, n=28) for i, make in enumerate(_SUBCLASSES)]
    if int(os.environ.get("RANK", "0")) == 0:
        logs = [
            [h["loss"], h["grad_norm"]]
            for trainer, _ in runs
            for h in trainer.state.log_history
            if "loss" in h
        ]
        calls = [list(call) for _, made in runs for call in made]
        (out / f"{sys.argv[1]}.json").write_text(json.dumps({"logs": logs, "calls": calls}))
