"""The argument table: one row per TrainingArguments field, a fresh docs page, and "not yet" refusals."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from hf_lightning.adapters.argument_carriers import unread_claims
from hf_lightning.adapters.argument_table import (
    ARGUMENT_TABLE,
    NOT_YET,
    SEQ2SEQ_ARGUMENT_TABLE,
    STATUSES,
    ArgumentRow,
    carriers_for,
    check_supported,
    is_default_value,
    not_yet_fields,
)
from hf_lightning.args.enums import HubStrategy
from hf_lightning.args.seq2seq import Seq2SeqTrainingArguments
from hf_lightning.args.training_args import TrainingArguments

ROOT = Path(__file__).resolve().parents[2]

# A non-default value for every "not yet" field; a new "not yet" row needs an entry here.
NOT_YET_VALUES = {
    "parallelism_config": {"tp_size": 2},
}


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _load_doc_tool():
    spec = importlib.util.spec_from_file_location(
        "gen_arguments_doc", ROOT / "tools" / "gen_arguments_doc.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_training_argument_has_a_row():
    """Each TrainingArguments field appears in the table."""
    assert sorted(_field_names(TrainingArguments) - set(ARGUMENT_TABLE)) == []


def test_table_names_only_real_fields():
    """The table names no field that TrainingArguments lacks."""
    assert sorted(set(ARGUMENT_TABLE) - _field_names(TrainingArguments)) == []


def test_seq2seq_rows_match_the_added_fields():
    """The seq2seq rows are exactly the fields Seq2SeqTrainingArguments adds."""
    added = _field_names(Seq2SeqTrainingArguments) - _field_names(TrainingArguments)
    assert set(SEQ2SEQ_ARGUMENT_TABLE) == added


@pytest.mark.parametrize("name,row", sorted({**ARGUMENT_TABLE, **SEQ2SEQ_ARGUMENT_TABLE}.items()))
def test_row_has_a_carrier_and_a_known_status(name, row):
    """Every row names a carrier and one of the three statuses."""
    assert row.carrier.strip() and row.status in STATUSES


def test_docs_page_is_fresh():
    """docs/arguments.md equals what tools/gen_arguments_doc.py renders from the table."""
    tool = _load_doc_tool()
    current = (ROOT / "docs" / "arguments.md").read_text(encoding="utf-8")
    assert current == tool.render(), "docs/arguments.md is stale; run: python tools/gen_arguments_doc.py"


def test_docs_page_lists_every_field_once():
    """The rendered page has one table line per TrainingArguments and seq2seq field."""
    text = _load_doc_tool().render()
    for name in _field_names(Seq2SeqTrainingArguments):
        assert text.count(f"| `{name}` |") == 1, name


def test_not_yet_values_cover_every_not_yet_row():
    """The refusal table below exercises every "not yet" row."""
    assert set(NOT_YET_VALUES) == {name for name, row in ARGUMENT_TABLE.items() if row.status == NOT_YET}


def test_defaults_are_supported():
    """Default arguments (plain and seq2seq) raise nothing."""
    check_supported(TrainingArguments())
    check_supported(Seq2SeqTrainingArguments())


@pytest.mark.parametrize("name,value", sorted(NOT_YET_VALUES.items()))
def test_not_yet_field_with_a_value_is_refused(name, value):
    """A "not yet" field set to a non-default value raises NotImplementedError naming it."""
    args = TrainingArguments()
    setattr(args, name, value)
    with pytest.raises(NotImplementedError, match=rf"`TrainingArguments\({name}="):
        check_supported(args)


def test_one_error_names_every_not_yet_field():
    """Several refused fields are reported together, in one error: "not yet" ones, and the Trainer-only ones
    when the DataLoader is the user's."""
    args = TrainingArguments(accelerator_config={"split_batches": True}, debug="underflow_overflow")
    args.parallelism_config = {"tp_size": 2}
    with pytest.raises(NotImplementedError) as caught:
        check_supported(args)
    message = str(caught.value)
    assert "`TrainingArguments(accelerator_config={'split_batches': True" in message
    assert (
        "`TrainingArguments(parallelism_config={'tp_size': 2})` is not supported by hf_lightning yet"
        in message
    )
    assert "`TrainingArguments(debug=[" in message and "is honoured by hf_lightning.Trainer only" in message
    check_supported(TrainingArguments(accelerator_config={"split_batches": True}, debug="underflow_overflow"),
                    by_trainer=True)  # fmt: skip


def test_refusal_names_the_seq2seq_class():
    """The error quotes the class the user built."""
    with pytest.raises(NotImplementedError, match=r"`Seq2SeqTrainingArguments\(debug="):
        check_supported(Seq2SeqTrainingArguments(debug="underflow_overflow"))  # a Lightning user's plan


def test_supported_fields_are_not_refused():
    """Setting supported and not-applicable fields is fine."""
    args = TrainingArguments(bf16=True, max_steps=3, do_train=True, report_to="csv", local_rank=0)
    assert not_yet_fields(args) == []


@dataclasses.dataclass
class _Config:
    split_batches: bool = False


@pytest.mark.parametrize(
    "value,default,expected",
    [
        ("", "", True),
        ([], "", True),  # debug: "" normalised to []
        (None, None, True),
        (_Config(), None, True),  # a config object built from nothing
        (_Config(split_batches=True), None, False),
        (HubStrategy.EVERY_SAVE, "every_save", True),
        (HubStrategy.END, "every_save", False),
        (0, None, False),
        (False, None, True),
        (True, False, False),
        ("ds.json", None, False),
    ],
)
def test_is_default_value(value, default, expected):
    """Normalised defaults count as defaults; anything else does not."""
    assert is_default_value(value, default) is expected


def test_carriers_cover_every_field():
    """carriers_for gives a carrier for every field of the arguments, seq2seq included."""
    assert set(carriers_for(Seq2SeqTrainingArguments())) == _field_names(Seq2SeqTrainingArguments)


def test_every_claimed_carrier_reads_its_field():
    """Each part of every supported row's carrier reads the field in its own code (docs/arguments.md is honest)."""
    assert unread_claims({**ARGUMENT_TABLE, **SEQ2SEQ_ARGUMENT_TABLE}) == []


def test_a_carrier_that_does_not_read_the_field_is_caught():
    """A planted row crediting HFModule with a field it never reads fails the check."""
    planted = {"push_to_hub": ArgumentRow("HFModule (uploads the model)")}
    assert unread_claims(planted) == ["push_to_hub: 'HFModule (uploads the model)' does not read it"]


def test_the_old_hf_module_rows_are_caught():
    """The rows that once credited HFModule with facade work fail the check."""
    planted = {
        name: ArgumentRow("HFModule")
        for name in ("activation_checkpointing", "torch_empty_cache_steps", "logging_nan_inf_filter")
    }
    assert len(unread_claims(planted)) == 3


def test_a_carrier_the_check_does_not_know_is_caught():
    """A carrier naming no known code (the old "NEFTune callback") is reported, so no row escapes."""
    planted = {"neftune_noise_alpha": ArgumentRow("NEFTune callback")}
    assert unread_claims(planted) == [
        "neftune_noise_alpha: 'NEFTune callback' names no carrier of CARRIER_SOURCES"
    ]


def test_one_false_part_of_a_joined_carrier_is_caught():
    """In an 'A + B' carrier, a B that does not read the field fails even when A does."""
    planted = {"max_steps": ArgumentRow("lightning.Trainer(max_steps) + DDPStrategy(max_steps)")}
    assert unread_claims(planted) == ["max_steps: 'DDPStrategy(max_steps)' does not read it"]


def test_a_carrier_is_checked_in_its_own_function():
    """lightning.Trainer is checked in the trainer-settings builder, not in the rest of the plan."""
    planted = {"dataloader_num_workers": ArgumentRow("lightning.Trainer(num_workers)")}
    assert unread_claims(planted) == [
        "dataloader_num_workers: 'lightning.Trainer(num_workers)' does not read it"
    ]


def test_rows_without_a_working_carrier_are_not_checked():
    """'not yet' and 'not applicable' rows claim nothing, so they are skipped."""
    planted = {
        "push_to_hub": ArgumentRow("HFModule", NOT_YET),
        "do_train": ArgumentRow("HFModule", "not applicable"),
    }
    assert unread_claims(planted) == []
