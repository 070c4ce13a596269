"""What subclasses from the ecosystem (TRL) and scripts observe of the Trainer, as on transformers:
transformers' signatures of the overridable hooks, its run attributes, Ctrl+C and ``config.use_cache``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.utils.data import RandomSampler, SequentialSampler

from hf_lightning import Trainer, TrainingArguments
from tests.tiny import RegressionModel, regression_data


def _args(tmp_path, **kw):
    base = dict(
        per_device_train_batch_size=8, max_steps=4, report_to="none", disable_tqdm=True, save_strategy="no"
    )
    base.update(kw)
    return TrainingArguments(str(tmp_path / "out"), **base)


class OneArgSamplers(Trainer):
    """Overrides with transformers' signatures: ``_get_train_sampler(self, train_dataset=None)``."""

    calls: list[str]

    def _get_train_sampler(self, train_dataset=None):
        self.calls.append("train")
        return RandomSampler(train_dataset if train_dataset is not None else self.train_dataset)

    def _get_eval_sampler(self, eval_dataset):
        self.calls.append("eval")
        return SequentialSampler(eval_dataset)


def test_sampler_overrides_with_transformers_signature_are_called_with_the_dataset(tmp_path):
    data = regression_data(32)
    trainer = OneArgSamplers(RegressionModel(), _args(tmp_path), train_dataset=data, eval_dataset=data[:8])
    trainer.calls = []
    trainer.train()
    metrics = trainer.evaluate()
    assert trainer.calls == ["train", "eval"]
    assert "eval_loss" in metrics


def test_get_dataloader_takes_transformers_dataloader_key(tmp_path):
    data = regression_data(16)
    trainer = Trainer(RegressionModel(), _args(tmp_path), eval_dataset={"a": data})
    loader = trainer._get_dataloader(
        data, "Evaluation", 4, sampler_fn=trainer._get_eval_sampler, dataloader_key="a"
    )
    assert len(loader) == 4


class LogsLikeOnlineDPO(Trainer):
    """Reads and writes transformers' run attributes in its own ``_maybe_log_save_evaluate``, as TRL's do."""

    def _maybe_log_save_evaluate(
        self, tr_loss, grad_norm, model, trial, epoch, ignore_keys_for_eval, start_time, learning_rate=None
    ):
        if self.control.should_log and self.state.global_step > self._globalstep_last_logged:
            loss = tr_loss.item()
            tr_loss -= tr_loss
            steps = self.state.global_step - self._globalstep_last_logged
            self._total_loss_scalar += loss
            self._globalstep_last_logged = self.state.global_step
            self.log({"loss": round(loss / steps, 4), "steps_logged": steps})
        if self.control.should_save:
            self._save_checkpoint(model, trial)
            self.control = self.callback_handler.on_save(self.args, self.state, self.control)


def test_run_attributes_read_and_written_by_a_subclass(tmp_path):
    trainer = LogsLikeOnlineDPO(
        RegressionModel(), _args(tmp_path, logging_steps=2), train_dataset=regression_data(32)
    )
    result = trainer.train()
    logged = [e for e in trainer.state.log_history if "steps_logged" in e]
    assert [e["step"] for e in logged] == [2, 4]
    assert all(e["steps_logged"] == 2 for e in logged)
    assert trainer._globalstep_last_logged == 4
    # train_loss comes from the total the subclass kept: the mean of the logged losses
    assert result.training_loss == pytest.approx(sum(e["loss"] for e in logged) * 2 / 4, rel=1e-3)


def test_use_cache_is_written_to_every_config(tmp_path):
    from transformers import ViTConfig, ViTForImageClassification

    model = ViTForImageClassification(
        ViTConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            image_size=8,
            patch_size=4,
            num_labels=2,
        )
    )
    assert not hasattr(model.config, "use_cache") or "use_cache" not in model.config.to_diff_dict()
    trainer = Trainer(model, _args(tmp_path))
    trainer.save_model()
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["use_cache"] is False


SCRIPT = textwrap.dedent(
    """
    import sys, torch
    torch.set_num_threads(1)
    sys.path.insert(0, {root!r})
    from hf_lightning import Trainer, TrainerCallback, TrainingArguments
    from tests.tiny import RegressionModel, regression_data

    class CtrlC(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if state.global_step == 2:
                raise KeyboardInterrupt
    args = TrainingArguments({out!r}, max_steps=5, per_device_train_batch_size=8, report_to="none",
                             disable_tqdm=True, save_strategy="no")
    trainer = Trainer(RegressionModel(), args, train_dataset=regression_data(64), callbacks=[CtrlC()])
    if sys.argv[1] == "catch":
        try:
            trainer.train()
        except KeyboardInterrupt:
            print("caught at step", trainer.state.global_step)
            sys.exit(3)
    trainer.train()
    """
)


@pytest.mark.parametrize("mode", ["catch", "plain"])
def test_ctrl_c_reaches_the_script_as_keyboard_interrupt(tmp_path, mode):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.format(root=root, out=str(tmp_path / "out")))
    proc = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=300)
    if mode == "catch":
        assert proc.returncode == 3, proc.stderr[-2000:]
        assert "caught at step 2" in proc.stdout
    else:  # Python's own ending of an uncaught KeyboardInterrupt, as under transformers
        assert proc.returncode == 130 or proc.returncode == -2, proc.stderr[-2000:]
        assert "KeyboardInterrupt" in proc.stderr


def test_pop_and_remove_callback_take_transformers_classes(tmp_path):
    """A script that swaps only the Trainer import still names transformers' callback classes."""
    import transformers
    from transformers.integrations import TensorBoardCallback

    args = _args(tmp_path, report_to="tensorboard", logging_steps=1)
    trainer = Trainer(RegressionModel(), args, train_dataset=regression_data(32))
    popped = trainer.pop_callback(TensorBoardCallback)
    assert popped is not None and type(popped).__name__ == "TensorBoardReporter"
    printer = trainer.pop_callback(transformers.PrinterCallback)
    assert printer is not None and type(printer).__name__ == "PrinterCallback"
    trainer.add_callback(printer)
    trainer.remove_callback(transformers.PrinterCallback)
    assert [type(cb).__name__ for cb in trainer.callback_handler.callbacks] == ["DefaultFlowCallback"]
    trainer.train()
    assert not [f for f in tmp_path.rglob("events.out.tfevents*")]


def test_a_dataset_without_length_needs_max_steps_at_construction(tmp_path):
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(regression_data(8))

    args = TrainingArguments(str(tmp_path / "out"), report_to="none", num_train_epochs=1)
    with pytest.raises(ValueError, match="does not implement __len__.*max_steps has to be specified"):
        Trainer(RegressionModel(), args, train_dataset=Stream())
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("library", ["transformers", "hf_lightning"])
def test_inner_training_loop_override_with_transformers_signature(tmp_path, library):
    """A subclass overriding ``_inner_training_loop(self, batch_size=None, args=None, ...)`` and calling super
    positionally (transformers' signature) trains; it is given the batch size, which counts only with
    ``auto_find_batch_size`` (as in transformers)."""
    import importlib

    lib = importlib.import_module(library)
    seen = []

    class Wrapped(lib.Trainer):
        def _inner_training_loop(self, batch_size=None, args=None, resume_from_checkpoint=None, trial=None,
                                 ignore_keys_for_eval=None):  # fmt: skip
            seen.append(batch_size)
            return super()._inner_training_loop(4, args, resume_from_checkpoint, trial, ignore_keys_for_eval)

    args = lib.TrainingArguments(str(tmp_path / library), per_device_train_batch_size=8, max_steps=2,
                                 report_to="none", disable_tqdm=True, save_strategy="no", use_cpu=True)  # fmt: skip
    trainer = Wrapped(RegressionModel(), args, train_dataset=regression_data(32))
    output = trainer.train()
    assert (seen, output.global_step, trainer.state.train_batch_size) == (
        [8],
        2,
        8,
    )  # read with auto_find only


def test_prepare_input_moves_one_nested_value_as_transformers(tmp_path):
    """``trainer._prepare_input(data)`` (called by ecosystem trainers) returns the same nesting and values."""
    import transformers

    data = {"a": [torch.ones(2), (torch.zeros(1), 3)], "b": "text"}
    results = []
    for lib in (transformers, __import__("hf_lightning")):
        args = lib.TrainingArguments(str(tmp_path / lib.__name__), report_to="none", use_cpu=True)
        moved = lib.Trainer(RegressionModel(), args)._prepare_input(data)
        results.append(
            (type(moved["a"]), type(moved["a"][1]), moved["a"][0].tolist(), moved["a"][1][1], moved["b"])
        )
    assert results[0] == results[1]


def test_train_with_an_unknown_keyword_raises_pythons_type_error_as_transformers(tmp_path):
    import transformers

    messages = []
    for lib in (transformers, __import__("hf_lightning")):
        args = lib.TrainingArguments(
            str(tmp_path / lib.__name__), report_to="none", use_cpu=True, max_steps=1
        )
        with pytest.raises(TypeError) as info:
            lib.Trainer(RegressionModel(), args, train_dataset=regression_data(8)).train(model_path="x")
        messages.append(str(info.value))
    assert messages[0] == messages[1] == "Trainer.train() got an unexpected keyword argument 'model_path'"


def test_overriding_a_step_of_transformers_own_loop_warns_that_it_has_no_effect():
    """A subclass overriding a method only transformers' own loop calls is told, at its ``class`` statement,
    that the override never runs here; overrides the loop does call (``training_step``) are not warned of."""
    with pytest.warns(UserWarning) as caught:

        class Custom(Trainer):
            def _save_rng_state(self, output_dir):
                raise AssertionError("never called")

            def _wrap_model(self, model, training=True, dataloader=None):
                raise AssertionError("never called")

            def get_batch_samples(self, epoch_iterator, num_batches, device):  # called: not warned of
                return super().get_batch_samples(epoch_iterator, num_batches, device)

            def training_step(self, model, inputs, num_items_in_batch=None):
                return super().training_step(model, inputs, num_items_in_batch)

    messages = [str(w.message) for w in caught if "has no effect" in str(w.message)]
    assert [m.split(" ")[0] for m in messages] == [
        f"{Custom.__qualname__}._save_rng_state",
        f"{Custom.__qualname__}._wrap_model",
    ]
    assert all(w.filename == __file__ for w in caught if "has no effect" in str(w.message))
    assert "docs/subclassing.md" in messages[0]


def test_train_builds_the_optimizer_through_create_optimizer_and_scheduler(tmp_path):
    """The method the Trainer documentation says to override for a custom optimizer is the one ``train()``
    calls (docs/divergences.md: transformers 5.24's loop calls ``create_optimizer`` directly)."""

    class OwnOptimizer(Trainer):
        def create_optimizer_and_scheduler(self, num_training_steps):
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.5)
            self.create_scheduler(num_training_steps, self.optimizer)

    trainer = OwnOptimizer(
        RegressionModel(), _args(tmp_path, learning_rate=1e-3), train_dataset=regression_data(32)
    )
    trainer.train()
    assert type(
        trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer
    ) is (torch.optim.SGD)
    assert trainer.state.log_history[-1]["train_loss"] > 0


def test_an_unknown_constructor_keyword_raises_pythons_type_error_with_the_same_traceback(tmp_path):
    """``Trainer(bogus=1)``: Python's own TypeError, its traceback as long as transformers' (no frame of ours)."""
    import traceback

    import transformers

    seen = []
    for lib in (transformers, __import__("hf_lightning")):
        with pytest.raises(TypeError) as info:
            lib.Trainer(model=None, args=None, bogus=1)
        frames = traceback.extract_tb(info.value.__traceback__)
        seen.append((str(info.value), [frame.name for frame in frames]))
    assert seen[0] == seen[1]
    assert seen[1][0] == "Trainer.__init__() got an unexpected keyword argument 'bogus'"


def test_an_eval_strategy_without_eval_dataset_raises_transformers_words(tmp_path):
    import transformers

    messages = []
    for lib in (transformers, __import__("hf_lightning")):
        args = lib.TrainingArguments(
            str(tmp_path / lib.__name__), eval_strategy="epoch", report_to="none", use_cpu=True
        )
        with pytest.raises(ValueError) as info:
            lib.Trainer(RegressionModel(), args)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "IntervalStrategy.EPOCH" in messages[1]
