"""Logging parity with transformers: the passive log level and the INFO lines of a short run."""

from __future__ import annotations

import logging
import re

import pytest
import torch

from tests.tiny import causal_lm_data, tiny_gpt2

pytest.importorskip("transformers")

# Loggers of the Trainer API: transformers' modules the Trainer runs, and every hf_lightning module. Model-side
# records (save_pretrained's "Configuration saved in ...", warning_once of modeling_utils) are the model's.
_TRAINER_API = (
    "transformers.trainer",
    "transformers.trainer_callback",
    "transformers.trainer_utils",
    "transformers.training_args",
    "transformers.optimization",
    "hf_lightning.",
)
# transformers' lines we do not reproduce, with the reason (docs/divergences.md, "Log lines").
NOT_REPRODUCED = {
    # transformers loads checkpoint weights non-strictly and reports the tied lm_head.weight as missing
    # (it is tied to the embeddings, not saved); we load strictly and tie, nothing is missing.
    "There were missing keys in the checkpoint model loaded: ['lm_head.weight'].",
}


@pytest.fixture
def both_verbose():
    """Both libraries at INFO, their records propagating to caplog; everything restored afterwards."""
    from transformers.utils import logging as transformers_logging

    from hf_lightning.utils import logging as hf_logging

    before = transformers_logging.get_verbosity()
    root = transformers_logging.get_logger()
    propagate = root.propagate
    transformers_logging.set_verbosity_info()
    transformers_logging.enable_propagation()
    transformers_logging.disable_default_handler()
    yield
    transformers_logging.enable_default_handler()
    root.propagate = propagate
    transformers_logging.set_verbosity(before)
    hf_logging.set_verbosity(logging.NOTSET)


def _args(lib, output_dir, **kwargs):
    base = dict(
        output_dir=str(output_dir),
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        save_strategy="steps",
        save_steps=2,
        logging_steps=2,
    )
    return lib.TrainingArguments(**{**base, **kwargs})


def _short_run(lib, output_dir) -> None:
    """Train 2 steps (an evaluation, a checkpoint, the best model loaded at the end), evaluate, save, then
    resume from the checkpoint for 2 more steps."""
    data = causal_lm_data(16, ragged=False)
    best = dict(eval_strategy="steps", eval_steps=2, load_best_model_at_end=True)
    first = lib.Trainer(
        model=tiny_gpt2(),
        args=_args(lib, output_dir, max_steps=2, **best),
        train_dataset=data,
        eval_dataset=data[:8],
    )
    first.train()
    first.evaluate()
    first.save_model()
    again = lib.Trainer(model=tiny_gpt2(), args=_args(lib, output_dir, max_steps=4), train_dataset=data)
    again.train(resume_from_checkpoint=True)


def _templates(records, output_dir) -> set[str]:
    """Each message with the output folder as <out> and every number as N."""
    found = set()
    for record in records:
        if record.levelno < logging.INFO or not record.name.startswith(_TRAINER_API):
            continue
        text = record.getMessage().replace(str(output_dir), "<out>")
        found.add(re.sub(r"\d[\d,.e-]*", "N", text))
    return found


def _captured_templates(lib, tmp_path, caplog, name) -> set[str]:
    caplog.clear()
    with caplog.at_level(logging.INFO):
        _short_run(lib, tmp_path / name)
    return _templates(caplog.records, tmp_path / name)


def test_passive_log_level_after_transformers_set_verbosity_info(tmp_path, both_verbose):
    """After transformers' set_verbosity_info(), get_process_log_level() is 20 in both libraries."""
    import transformers

    import hf_lightning

    theirs = transformers.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    ours = hf_lightning.TrainingArguments(output_dir=str(tmp_path), report_to="none")
    assert ours.get_process_log_level() == theirs.get_process_log_level() == logging.INFO


def test_info_lines_of_a_short_run_match(tmp_path, caplog, both_verbose):
    """train + evaluate + save + resume log the same INFO message templates as transformers."""
    import transformers

    import hf_lightning

    theirs = _captured_templates(transformers, tmp_path, caplog, "hf") - NOT_REPRODUCED
    ours = _captured_templates(hf_lightning, tmp_path, caplog, "ours")
    assert (sorted(ours - theirs), sorted(theirs - ours)) == ([], [])


def _warning_run(lib, output_dir) -> None:
    """A duplicate callback, then EarlyStoppingCallback without load_best_model_at_end, for 2 steps."""
    data = causal_lm_data(8, ragged=False)
    args = _args(
        lib, output_dir, max_steps=2, eval_strategy="steps", eval_steps=1, metric_for_best_model="loss"
    )
    trainer = lib.Trainer(
        model=tiny_gpt2(),
        args=args,
        train_dataset=data,
        eval_dataset=data[:4],
        callbacks=[lib.EarlyStoppingCallback(early_stopping_patience=5)],
    )
    trainer.add_callback(lib.DefaultFlowCallback)
    trainer.train()


def _warning_templates(lib, tmp_path, caplog, name) -> set[str]:
    caplog.clear()
    with caplog.at_level(logging.INFO):
        _warning_run(lib, tmp_path / name)
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    text = {
        t.replace("transformers.", "").replace("hf_lightning.", "") for t in _templates(records, tmp_path)
    }
    return {re.sub(r"<class '[\w.]*?(\w+)'>", r"<class \1>", t) for t in text}


def test_warnings_use_transformers_words(tmp_path, caplog, both_verbose):
    """The Trainer's and the callbacks' warnings of a run say what transformers' say, word for word."""
    import transformers

    import hf_lightning

    theirs = _warning_templates(transformers, tmp_path, caplog, "hf")
    ours = _warning_templates(hf_lightning, tmp_path, caplog, "ours")
    assert (sorted(ours - theirs), sorted(theirs - ours)) == ([], [])


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.parametrize("verbose_before", [True, False])
def test_setting_up_devices_is_logged_when_the_arguments_are_built(tmp_path, verbose_before):
    """transformers logs "PyTorch: setting up devices" once, in TrainingArguments' __post_init__: a script
    that raises the verbosity only after parsing its arguments never sees it, one that raised it before sees
    it once. Ours logs it at the same moment, never again (the Trainer, the device lookups). Counted by a
    handler on transformers' training_args logger (where a script's handlers see ours too)."""
    import transformers
    from transformers.utils import logging as transformers_logging

    import hf_lightning
    from hf_lightning.utils import logging as hf_logging

    before = transformers_logging.get_verbosity()
    twin = logging.getLogger("transformers.training_args")
    counts = {}
    try:
        for library in (transformers, hf_lightning):
            lines = _Lines()
            twin.addHandler(lines)
            if verbose_before:
                transformers_logging.set_verbosity_info()
            else:
                transformers_logging.set_verbosity_warning()
            args = library.TrainingArguments(str(tmp_path / library.__name__), report_to="none", use_cpu=True)
            transformers_logging.set_verbosity_info()
            library.Trainer(model=tiny_gpt2(), args=args, train_dataset=causal_lm_data(n=2))
            _ = (args.device, args.n_gpu)
            twin.removeHandler(lines)
            counts[library.__name__] = lines.messages.count("PyTorch: setting up devices")
    finally:
        transformers_logging.set_verbosity(before)
        hf_logging.set_verbosity(logging.NOTSET)
    assert counts["hf_lightning"] == counts["transformers"] == (1 if verbose_before else 0)


class _Stream(torch.utils.data.IterableDataset):
    """Token rows streamed (no ``__len__``)."""

    def __init__(self, rows):
        self.rows = rows

    def __iter__(self):
        return iter(self.rows)


def test_an_iterable_dataset_logs_transformers_sampling_note(tmp_path, caplog, both_verbose):
    """A streamed train_dataset: transformers notes at construction that train_sampling_strategy is ignored."""
    import transformers

    import hf_lightning

    found = {}
    for lib in (transformers, hf_lightning):
        caplog.clear()
        with caplog.at_level(logging.INFO):
            args = _args(lib, tmp_path / lib.__name__, max_steps=1, save_strategy="no")
            lib.Trainer(model=tiny_gpt2(), args=args, train_dataset=_Stream(causal_lm_data(8, ragged=False)))
        found[lib.__name__] = [r.getMessage() for r in caplog.records if "IterableDataset" in r.getMessage()]
    assert len(found["transformers"]) == 1
    assert found["hf_lightning"] == found["transformers"]
