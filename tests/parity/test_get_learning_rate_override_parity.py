"""A Trainer subclass that overrides ``_get_learning_rate`` (or an instance patched with one) gives the
learning rate logged at every step, asked between the update and the scheduler's step, as transformers asks."""

from __future__ import annotations

import pytest
import transformers

import hf_lightning
from tests.parity._run import BASE_ARGS, step_logs
from tests.tiny import causal_lm_data, tiny_gpt2


def _run(library, tmp_path, how: str) -> list[tuple[float, int]]:
    asked: list[int] = []

    class Halved(library.Trainer):
        def _get_learning_rate(self):
            asked.append(self.state.global_step)
            return super()._get_learning_rate() / 2

    args = library.TrainingArguments(
        output_dir=str(tmp_path / library.__name__),
        **BASE_ARGS,
        max_steps=4,
        logging_steps=1,
        learning_rate=1e-3,
    )
    cls = Halved if how == "subclass" else library.Trainer
    trainer = cls(model=tiny_gpt2(dropout=0.0), args=args, train_dataset=causal_lm_data(n=16))
    if how == "patched":
        plain = trainer._get_learning_rate

        def patched():
            asked.append(trainer.state.global_step)
            return plain() / 2

        trainer._get_learning_rate = patched
    trainer.train()
    return [(entry["learning_rate"], entry["step"]) for entry in step_logs(trainer)], asked


@pytest.mark.parametrize("how", ["subclass", "patched"])
def test_an_overridden_get_learning_rate_gives_the_logged_rate(tmp_path, how):
    (theirs, theirs_asked), (ours, ours_asked) = (
        _run(transformers, tmp_path, how),
        _run(hf_lightning, tmp_path, how),
    )
    assert ours == theirs
    assert ours_asked == theirs_asked
    assert [rate for rate, _ in ours][0] == pytest.approx(0.5e-3)
