"""hf_lightning.utils.logging: transformers' logging API for hf_lightning, log_level applied, the bridges."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import re

import pytest
import torch

from hf_lightning import Trainer, TrainingArguments
from hf_lightning.utils import logging as hf_logging
from hf_lightning.utils.trainer_logs import configure_trainer_logging
from hf_lightning.utils.transformers_bridge import (
    install_library_root,
    install_twin_filters,
    set_own_level,
    twin_of,
)
from tests.tiny import RegressionModel, regression_data

ROOT = "hf_lightning"


@pytest.fixture(autouse=True)
def _restore_logging():
    """Each test starts from the library defaults and leaves them so."""
    root = hf_logging.get_logger()
    saved = (
        root.__dict__.get("_own_level", logging.NOTSET),
        root.__dict__.get("_own_propagate"),
        list(root.handlers),
    )
    twin = logging.getLogger("transformers.trainer")
    twin_saved = (twin.level, list(twin.filters), list(twin.handlers), twin.disabled)
    set_own_level(root, logging.NOTSET)
    yield
    set_own_level(root, saved[0])
    root.propagate, root.handlers[:] = saved[1], saved[2]
    twin.setLevel(twin_saved[0])
    twin.filters[:], twin.handlers[:], twin.disabled = twin_saved[1], twin_saved[2], twin_saved[3]


def _args(tmp_path, **kwargs):
    return TrainingArguments(
        output_dir=str(tmp_path), report_to="none", use_cpu=True, disable_tqdm=True, **kwargs
    )


def test_level_constants_are_the_logging_levels():
    """The level constants are the standard library's."""
    assert (hf_logging.DEBUG, hf_logging.INFO, hf_logging.WARNING, hf_logging.ERROR) == (10, 20, 30, 40)


def test_get_logger_without_name_is_the_library_root():
    """get_logger() returns the `hf_lightning` root logger."""
    assert hf_logging.get_logger().name == ROOT


def test_set_verbosity_info_sets_the_library_verbosity():
    """set_verbosity_info makes get_verbosity 20 and enables INFO on hf_lightning's loggers."""
    hf_logging.set_verbosity_info()
    assert hf_logging.get_verbosity() == logging.INFO
    assert logging.getLogger("hf_lightning.trainer.train").isEnabledFor(logging.INFO)


def test_set_verbosity_helpers_set_their_levels():
    """set_verbosity_debug/_warning/_error set DEBUG, WARNING and ERROR."""
    seen = []
    for setter in (
        hf_logging.set_verbosity_debug,
        hf_logging.set_verbosity_warning,
        hf_logging.set_verbosity_error,
    ):
        setter()
        seen.append(hf_logging.get_verbosity())
    assert seen == [logging.DEBUG, logging.WARNING, logging.ERROR]


def test_passive_log_level_follows_the_library_verbosity(tmp_path):
    """get_process_log_level() with log_level='passive' is the library verbosity."""
    hf_logging.set_verbosity_info()
    assert _args(tmp_path).get_process_log_level() == logging.INFO


def test_trainer_applies_log_level(tmp_path):
    """Trainer(args=log_level='info') sets the library verbosity to INFO, as transformers' Trainer does."""
    Trainer(model=RegressionModel(), args=_args(tmp_path, log_level="info"))
    assert hf_logging.get_verbosity() == logging.INFO


def test_trainer_with_passive_log_level_keeps_following(tmp_path):
    """The default log_level='passive' sets no level of hf_lightning's own."""
    Trainer(model=RegressionModel(), args=_args(tmp_path))
    assert hf_logging.get_logger().__dict__["_own_level"] == logging.NOTSET


def test_replica_uses_log_level_replica(tmp_path, monkeypatch):
    """On a process that does not log, log_level_replica is the level applied."""
    monkeypatch.setenv("LOCAL_RANK", "1")
    configure_trainer_logging(_args(tmp_path, log_level="info", log_level_replica="error"))
    assert hf_logging.get_verbosity() == logging.ERROR


def test_log_level_info_prints_the_training_header(tmp_path, caplog):
    """With log_level='info', train() logs transformers' '***** Running training *****' block."""
    trainer = Trainer(
        model=RegressionModel(),
        args=_args(tmp_path, log_level="info", max_steps=2, save_strategy="no"),
        train_dataset=regression_data(16),
    )
    with caplog.at_level(logging.INFO):
        trainer.train()
    messages = [r.getMessage() for r in caplog.records]
    assert "***** Running training *****" in messages
    assert "  Total optimization steps = 2" in messages


@pytest.fixture
def transformers_stderr():
    """transformers' stderr handler writing to a buffer (its logging set up, as importing it does)."""
    from transformers.utils import logging as tf_logging

    tf_logging.get_logger()
    stream = io.StringIO()
    previous = tf_logging._default_handler.setStream(stream)
    yield stream
    tf_logging._default_handler.setStream(previous)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_without_transformers_logging_the_default_handler_prints_when_the_application_has_none(monkeypatch):
    """transformers' logging not set up, no handler of the application: stderr gets '[hf_lightning] message'."""
    from transformers.utils import logging as tf_logging

    stream = io.StringIO()
    monkeypatch.setattr(tf_logging, "_default_handler", None)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr("sys.stderr", stream)
    hf_logging.set_verbosity_info()
    logging.getLogger("hf_lightning.trainer.train").info("hello")
    assert stream.getvalue() == "[hf_lightning] hello\n"


def test_without_transformers_logging_records_reach_the_application(monkeypatch):
    """transformers' logging not set up: our records propagate to the application's handlers, the default
    handler stays quiet."""
    from transformers.utils import logging as tf_logging

    stream, app = io.StringIO(), _Collect()
    monkeypatch.setattr(tf_logging, "_default_handler", None)
    monkeypatch.setattr(logging.getLogger(), "handlers", [app])
    monkeypatch.setattr("sys.stderr", stream)
    hf_logging.set_verbosity_info()
    logging.getLogger("hf_lightning.trainer.train").info("hello")
    assert (app.messages, stream.getvalue()) == (["hello"], "")


def test_transformers_stderr_handler_prints_our_lines_and_the_application_does_not(
    monkeypatch, transformers_stderr
):
    """As transformers' Trainer: our record is printed by transformers' stderr handler as
    '[transformers] message', and a script's ``basicConfig`` handler does not see it (transformers'
    library root does not propagate)."""
    app = _Collect()
    monkeypatch.setattr(logging.getLogger(), "handlers", [app])
    monkeypatch.setattr(logging.getLogger("transformers"), "propagate", False)  # its default unless CI=1
    hf_logging.set_verbosity_info()
    logging.getLogger("hf_lightning.trainer.train").info("hello")
    assert (transformers_stderr.getvalue(), app.messages) == ("[transformers] hello\n", [])


def test_transformers_explicit_format_formats_our_lines(transformers_stderr):
    """An example script's ``enable_explicit_format()`` on transformers gives our lines that format too."""
    from transformers.utils import logging as tf_logging

    handler = tf_logging._default_handler
    hf_logging.set_verbosity_info()
    tf_logging.enable_explicit_format()
    try:
        logging.getLogger("hf_lightning.trainer.train").info("hello")
    finally:
        handler.setFormatter(logging.Formatter("[transformers] %(message)s"))
    assert re.fullmatch(r"\[INFO\|test_logging\.py:\d+\] \S+ \S+ >> hello\n", transformers_stderr.getvalue())


def test_transformers_verbosity_is_ours_once_its_logging_is_set_up(transformers_stderr, caplog):
    """With transformers' verbosity at its WARNING default, our INFO lines are not printed, whatever the
    application's root level (as transformers' Trainer's own)."""
    from transformers.utils import logging as tf_logging

    before = tf_logging.get_verbosity()
    tf_logging.set_verbosity_warning()
    try:
        with caplog.at_level(logging.INFO):
            logging.getLogger("hf_lightning.trainer.train").info("hidden")
            logging.getLogger("hf_lightning.trainer.train").warning("shown")
    finally:
        tf_logging.set_verbosity(before)
    assert transformers_stderr.getvalue() == "[transformers] shown\n"


def test_propagation_follows_transformers(monkeypatch, transformers_stderr):
    """transformers' library root propagating (``CI=1``, ``enable_propagation()``) makes ours propagate."""
    from transformers.utils import logging as tf_logging

    library = logging.getLogger("transformers")
    app = _Collect()
    monkeypatch.setattr(logging.getLogger(), "handlers", [app])
    monkeypatch.setattr(library, "propagate", True)
    assert hf_logging.get_logger().propagate
    logging.getLogger("hf_lightning.trainer.train").warning("both")
    assert (app.messages, transformers_stderr.getvalue()) == (["both"], "[transformers] both\n")
    tf_logging.disable_propagation()
    assert not hf_logging.get_logger().propagate


def test_disable_default_handler_removes_it(transformers_stderr):
    """disable_default_handler / enable_default_handler remove and restore ours (and with it the hand-over
    to transformers' stderr handler)."""
    hf_logging.disable_default_handler()
    without = len(hf_logging.get_logger().handlers)
    logging.getLogger("hf_lightning.trainer.train").warning("not printed")
    hf_logging.enable_default_handler()
    assert len(hf_logging.get_logger().handlers) == without + 1
    assert transformers_stderr.getvalue() == ""


def test_enable_and_disable_propagation_are_ours_to_set(monkeypatch):
    """enable_propagation / disable_propagation decide whatever transformers' propagation."""
    app = _Collect()
    monkeypatch.setattr(logging.getLogger(), "handlers", [app])
    hf_logging.set_verbosity_info()
    hf_logging.disable_propagation()
    logging.getLogger("hf_lightning.x").info("kept inside")
    hf_logging.enable_propagation()
    logging.getLogger("hf_lightning.x").info("reaches the root")
    assert app.messages == ["reaches the root"]


def test_explicit_format_and_reset_format():
    """enable_explicit_format gives the root's handlers transformers' explicit format; reset_format clears it."""
    handler = logging.StreamHandler(io.StringIO())
    hf_logging.add_handler(handler)
    hf_logging.enable_explicit_format()
    explicit = handler.formatter._fmt
    hf_logging.reset_format()
    hf_logging.remove_handler(handler)
    assert explicit.startswith("[%(levelname)s|%(filename)s:%(lineno)s]")
    assert handler.formatter is None


def test_transformers_verbosity_governs_ours():
    """transformers' set_verbosity_info() makes hf_lightning's verbosity INFO too."""
    from transformers.utils import logging as transformers_logging

    before = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_info()
    try:
        level = hf_logging.get_verbosity()
    finally:
        transformers_logging.set_verbosity(before)
    assert level == logging.INFO


def test_own_verbosity_wins_over_transformers():
    """A verbosity set through hf_lightning is kept whatever transformers' is."""
    from transformers.utils import logging as transformers_logging

    before = transformers_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    transformers_logging.set_verbosity_info()
    try:
        level = hf_logging.get_verbosity()
    finally:
        transformers_logging.set_verbosity(before)
    assert level == logging.ERROR


def test_without_any_verbosity_the_application_decides(caplog, monkeypatch):
    """With no level of ours and transformers' logging not set up, the application's root level applies."""
    from transformers.utils import logging as tf_logging

    monkeypatch.setattr(tf_logging, "_default_handler", None)
    with caplog.at_level(logging.INFO):
        assert hf_logging.get_verbosity() == logging.INFO


def test_set_verbosity_notset_follows_transformers_again():
    """set_verbosity(NOTSET) drops our own level: transformers' verbosity governs again."""
    from transformers.utils import logging as transformers_logging

    before = transformers_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.set_verbosity(logging.NOTSET)
    transformers_logging.set_verbosity_debug()
    try:
        level = hf_logging.get_verbosity()
    finally:
        transformers_logging.set_verbosity(before)
    assert level == logging.DEBUG


def test_bridging_keeps_a_custom_logger_class():
    """A library root created with a custom logger class keeps that class's methods once bridged."""

    class Custom(logging.Logger):
        def hello(self) -> str:
            return "hi"

    logging.setLoggerClass(Custom)
    try:
        probe = logging.getLogger("hf_lightning_probe_root")
    finally:
        logging.setLoggerClass(logging.Logger)
    bridged = install_library_root("hf_lightning_probe_root")
    assert bridged is probe and isinstance(bridged, Custom) and bridged.hello() == "hi"


def test_twin_of_maps_the_trainer_modules():
    """hf_lightning.trainer.* speaks for transformers.trainer, hf_lightning.callbacks.* for trainer_callback."""
    assert twin_of("hf_lightning.trainer.checkpointing") == "transformers.trainer"
    assert twin_of("hf_lightning.callbacks.builtin") == "transformers.trainer_callback"
    assert twin_of("hf_lightning.trainer_utils_memory") is None


def test_silencing_the_transformers_trainer_logger_silences_ours(caplog):
    """A level set on logging.getLogger('transformers.trainer') applies to hf_lightning.trainer.* records."""
    hf_logging.set_verbosity_info()
    logging.getLogger("hf_lightning.trainer.train")
    install_twin_filters()
    logging.getLogger("transformers.trainer").setLevel(logging.ERROR)
    logging.getLogger("hf_lightning.trainer.train").warning("dropped")
    assert caplog.records == []


def test_a_handler_on_the_transformers_trainer_logger_receives_ours():
    """A handler attached to transformers.trainer (e.g. a CaptureLogger) also receives our trainer records."""
    stream = io.StringIO()
    logging.getLogger("transformers.trainer").addHandler(logging.StreamHandler(stream))
    install_twin_filters()
    logging.getLogger("hf_lightning.trainer.train").warning("seen")
    assert stream.getvalue() == "seen\n"


def test_a_patched_method_of_the_transformers_logger_receives_our_line(caplog):
    """transformers' tests patch ``transformers.trainer_callback.logger.warning``: the mock gets our line
    (formatted, as transformers' call passes it) in place of the handlers, as it gets transformers'."""
    from unittest import mock

    import transformers.trainer_callback

    from hf_lightning import CallbackHandler, DefaultFlowCallback

    with mock.patch("transformers.trainer_callback.logger.warning") as warn:
        CallbackHandler([DefaultFlowCallback, DefaultFlowCallback], None, None, None, None)
    assert warn.called and "DefaultFlowCallback" in warn.call_args[0][0]
    assert [r for r in caplog.records if "DefaultFlowCallback" in r.getMessage()] == []
    assert not isinstance(transformers.trainer_callback.logger.__dict__.get("warning"), mock.Mock)


def test_a_replaced_transformers_logger_object_receives_our_line():
    """``mock.patch("transformers.trainer.logger")`` swaps the module's logger object: it gets our line."""
    from unittest import mock

    import transformers.trainer  # noqa: F401 - the module whose logger is replaced

    with mock.patch("transformers.trainer.logger") as fake:
        logging.getLogger("hf_lightning.trainer.train").warning("seen by the replacement")
    fake.warning.assert_called_once_with("seen by the replacement")


def test_a_capture_logger_on_the_transformers_library_logger_receives_ours():
    """transformers' tests capture with ``CaptureLogger(transformers.logging.get_logger())``: a handler on
    the library logger receives our record once, and transformers' stderr handler prints it, as they
    would a record of transformers'."""
    from transformers.testing_utils import CaptureLogger
    from transformers.utils import logging as tf_logging

    install_twin_filters()
    library = tf_logging.get_logger()  # also installs transformers' stderr handler
    theirs = io.StringIO()
    previous = tf_logging._default_handler.setStream(theirs)
    try:
        with CaptureLogger(library) as captured:
            logging.getLogger("hf_lightning.callbacks.handler").warning("seen once")
    finally:
        tf_logging._default_handler.setStream(previous)
    assert captured.out == "seen once\n"
    assert theirs.getvalue() == "[transformers] seen once\n"


def test_a_handler_on_both_the_root_and_transformers_gets_our_record_once():
    """pytest's capture handler sits on the root logger and on every non-propagating one (``transformers``):
    our record reaches it once, by our own propagation."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect()
    for name in ("", "transformers"):
        logging.getLogger(name).addHandler(handler)
    try:
        install_twin_filters()
        logging.getLogger("hf_lightning.trainer.train").warning("once")
    finally:
        for name in ("", "transformers"):
            logging.getLogger(name).removeHandler(handler)
    assert [r.getMessage() for r in records] == ["once"]


def test_propagation_off_inside_transformers_stops_there():
    """A twin with ``propagate=False`` keeps our records from the library logger's handlers, as it would
    keep transformers' own."""
    stream = io.StringIO()
    library = logging.getLogger("transformers")
    handler = logging.StreamHandler(stream)
    library.addHandler(handler)
    twin = logging.getLogger("transformers.trainer")
    twin.propagate = False
    try:
        install_twin_filters()
        logging.getLogger("hf_lightning.trainer.train").warning("kept inside")
    finally:
        twin.propagate = True
        library.removeHandler(handler)
    assert stream.getvalue() == ""


@dataclasses.dataclass
class _ArgsWithDtype(TrainingArguments):
    dtype: torch.dtype = torch.bfloat16
    compute_dtype: torch.dtype = torch.float16


def test_to_dict_names_a_top_level_dtype(tmp_path):
    """to_dict() turns a torch.dtype field into its name ('bfloat16'), as transformers does for `dtype`."""
    d = _ArgsWithDtype(output_dir=str(tmp_path), report_to="none").to_dict()
    assert (d["dtype"], d["compute_dtype"]) == ("bfloat16", "float16")


def test_to_json_string_accepts_a_dtype_field(tmp_path):
    """A dtype field no longer breaks to_json_string (training_args.json)."""
    text = _ArgsWithDtype(output_dir=str(tmp_path), report_to="none").to_json_string()
    assert json.loads(text)["dtype"] == "bfloat16"


def test_bad_resume_path_names_it_as_transformers_does(tmp_path):
    """train(resume_from_checkpoint=<no checkpoint>) raises transformers' "Can't find a valid checkpoint at"."""
    trainer = Trainer(
        model=RegressionModel(), args=_args(tmp_path, max_steps=1), train_dataset=regression_data(8)
    )
    missing = str(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=f"Can't find a valid checkpoint at {missing}"):
        trainer.train(resume_from_checkpoint=missing)
