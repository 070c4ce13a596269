"""Training mode before every micro-batch, as transformers' ``training_step`` sets it.

hf_lightning skips the ``model.train()`` walk when every submodule already trains and ``train`` would
do nothing else; these tests pin what must stay observable: a submodule switched to eval mode trains
again at the next micro-batch, and a model whose ``train`` does more is called as often as transformers
calls it.
"""

from __future__ import annotations

from torch import nn

from tests.parity._run import run_both
from tests.tiny import RegressionModel, regression_data


class CountingTrain(RegressionModel):
    """A model whose ``train`` override has a side effect (a call count)."""

    def __init__(self) -> None:
        super().__init__(dropout=0.1)
        self.train_calls = 0

    def train(self, mode: bool = True) -> CountingTrain:
        if mode:
            self.train_calls += 1
        return super().train(mode)


def test_custom_train_override_is_called_as_often_as_transformers_calls_it(tmp_path):
    """gradient_accumulation_steps=2, 3 steps: one call per micro-batch in both trainers."""
    both = run_both(
        lambda _: CountingTrain(),
        regression_data(48),
        tmp_path,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        max_steps=3,
        learning_rate=0.1,
    )
    assert both["ours"].model.train_calls == both["hf"].model.train_calls
    assert both["ours"].model.train_calls >= 6


def _dropout_modes_seen(lib, tmp_path) -> list[bool]:
    """Train 4 steps; a callback puts the dropout in eval mode before steps 2 and 3; the modes its forward saw."""
    model = RegressionModel(dropout=0.5)
    seen: list[bool] = []
    model.dropout.register_forward_pre_hook(lambda module, args: seen.append(module.training))

    class EvalDropout(lib.TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            if state.global_step in (1, 2):
                model.dropout.eval()

    args = lib.TrainingArguments(
        output_dir=str(tmp_path / lib.__name__),
        per_device_train_batch_size=4,
        max_steps=4,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    lib.Trainer(model=model, args=args, train_dataset=regression_data(32), callbacks=[EvalDropout()]).train()
    return seen


def test_submodule_switched_to_eval_trains_again_at_the_next_micro_batch(tmp_path):
    import transformers

    import hf_lightning

    ours, theirs = _dropout_modes_seen(hf_lightning, tmp_path), _dropout_modes_seen(transformers, tmp_path)
    assert ours == theirs == [True, True, True, True]


def test_an_eval_submodule_of_a_training_model_is_not_skipped():
    """The check looks at every submodule, not only the root."""
    from hf_lightning.trainer_utils import ensure_training_mode

    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(0.5), nn.Linear(2, 2)))
    model[1][0].eval()
    assert model.training and not model[1][0].training
    ensure_training_mode(model)
    assert all(m.training for m in model.modules())


def test_registered_none_and_shared_submodules_are_walked():
    """A ``None`` slot is skipped; a module shared by two parents is checked (and switched) too."""
    from hf_lightning.trainer_utils import ensure_training_mode

    shared = nn.Dropout(0.5)
    model = nn.Module()
    model.register_module("missing", None)
    model.a = nn.Sequential(shared)
    model.b = nn.Sequential(nn.Linear(2, 2), shared)
    ensure_training_mode(model)  # nothing to do, no error on the None slot
    shared.eval()
    ensure_training_mode(model)
    assert all(m.training for m in model.modules())
