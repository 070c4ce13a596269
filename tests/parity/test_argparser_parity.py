"""Parity: hf_lightning.HfArgumentParser against transformers.HfArgumentParser.

The same command lines are parsed by transformers' parser into
``(ModelArgs, transformers.TrainingArguments)`` and by ours into
``(ModelArgs, hf_lightning.args.training_args.TrainingArguments)``; the model arguments must be equal
and the training arguments must agree through ``to_dict()``. To test the parser alone, both
parsers are also run over transformers' own ``TrainingArguments``, where the options they build
and the dataclasses they fill must be identical.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Optional

import pytest
import transformers

from hf_lightning.args.parser import HfArgumentParser
from hf_lightning.args.training_args import TrainingArguments


class Attention(Enum):
    EAGER = "eager"
    SDPA = "sdpa"


@dataclass
class ModelArgs:
    model_name_or_path: str = field(metadata={"help": "Model id or path."})
    config_name: Optional[str] = None
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    attn_implementation: Attention = Attention.EAGER
    trust_remote_code: bool = False
    use_fast: bool = True
    lora_targets: list[str] = field(default_factory=list)
    lora_rank: int | None = None
    model_kwargs: dict | str | None = None
    max_length: int = field(default=128, metadata={"aliases": ["--max_len"], "help": "Longest sequence."})


COMMAND_LINES = [
    "--use_cpu --learning_rate 1e-4 --bf16 --eval_strategy steps",
    "--report_to none",
    "--no_dataloader_pin_memory",
    """--lr_scheduler_kwargs '{"num_cycles": 2}'""",
    "--include_for_metrics inputs loss",
    "--fsdp ''",
    "--per_device_train_batch_size 4 --gradient_accumulation_steps 2 --num_train_epochs 2.5",
    "--max_steps 100 --warmup_steps 0.1 --logging_steps 0.05",
    "--eval_strategy steps --eval_steps 5 --save_steps 5 --load_best_model_at_end --metric_for_best_model loss",
    "--lr_scheduler_type cosine_with_restarts --optim adamw_torch",
    "--save_total_limit 2 --save_only_model true",
    "--weight_decay 0.01 --adam_beta1 0.8 --adam-beta2 0.95 --max-grad-norm 0.5",
    "--seed 7 --data_seed 3 --full_determinism no",
    "--remove_unused_columns false --label_names labels start_positions",
    """--activation_checkpointing --activation_checkpointing_kwargs '{"use_reentrant": false}'""",
    "--do_train --do_eval --do_predict",
    "--use_cpu --dataloader_num_workers 0 --dataloader_drop_last",
    "--neftune_noise_alpha 5 --label_smoothing_factor 0.1",
    "--train_sampling_strategy group_by_length --length_column_name len",
    "--logging_strategy epoch --save_strategy epoch --eval_strategy epoch",
    "--torch_compile false --run_name myrun --disable_tqdm true",
    "--log_level info --logging_first_step --logging_nan_inf_filter no",
    "--include_num_input_tokens_seen",
    "--debug underflow_overflow",
    "--resume_from_checkpoint ckpt --ignore_data_skip",
    "--average_tokens_across_devices false --prediction_loss_only",
    "--dtype bfloat16 --attn_implementation sdpa --trust_remote_code --no_use_fast",
    """--lora_targets q_proj v_proj --lora_rank 8 --model_kwargs '{"a": 1}' --max_len 64 --config_name c""",
]

ERROR_LINES = [
    ("--eval_strategy sometimes", SystemExit),
    ("--bf16 maybe", SystemExit),
    ("--dtype float16", SystemExit),
    ("--max_steps ten", SystemExit),
    ("--unknown_option 1", ValueError),
]


def _words(tmp_path, line: str) -> list[str]:
    return ["--model_name_or_path", "tiny", "--output_dir", str(tmp_path), *shlex.split(line)]


def _parse_theirs(words: list[str], training_args=transformers.TrainingArguments):
    parser = transformers.HfArgumentParser((ModelArgs, training_args))
    return parser.parse_args_into_dataclasses(words, look_for_args_file=False)


def _parse_ours(words: list[str], training_args=TrainingArguments):
    parser = HfArgumentParser((ModelArgs, training_args))
    return parser.parse_args_into_dataclasses(words, look_for_args_file=False)


# Not a parser matter: transformers' TrainingArguments fills a default AcceleratorConfig when
# `accelerator_config` is None; it is compared on its own in test_accelerator_config_default.
TRAINING_ARGS_ONLY = {"accelerator_config"}


@pytest.mark.parametrize("line", COMMAND_LINES)
def test_command_line_parity_on_transformers_dataclasses(tmp_path, line):
    """Over transformers' own TrainingArguments, both parsers fill identical dataclasses."""
    words = _words(tmp_path, line)
    their_model, their_args = _parse_theirs(words)
    our_model, our_args = _parse_ours(words, training_args=transformers.TrainingArguments)
    assert our_model == their_model
    assert our_args.to_dict() == their_args.to_dict()


@pytest.mark.parametrize("line", COMMAND_LINES)
def test_command_line_parity(tmp_path, line):
    """A command line gives the same ModelArgs and, through to_dict(), the same TrainingArguments."""
    words = _words(tmp_path, line)
    their_model, their_args = _parse_theirs(words)
    our_model, our_args = _parse_ours(words)
    assert our_model == their_model
    theirs, ours = their_args.to_dict(), our_args.to_dict()
    assert ours.keys() == theirs.keys()
    compared = ours.keys() - TRAINING_ARGS_ONLY
    assert {k: ours[k] for k in compared} == {k: theirs[k] for k in compared}


def test_accelerator_config_default(tmp_path):
    """With no --accelerator_config, to_dict() shows the same accelerator_config as transformers."""
    words = _words(tmp_path, "")
    assert (
        _parse_ours(words)[1].to_dict()["accelerator_config"]
        == (_parse_theirs(words)[1].to_dict()["accelerator_config"])
    )


@pytest.mark.parametrize(("line", "error"), ERROR_LINES)
def test_command_line_errors_match(tmp_path, line, error):
    """A command line that transformers rejects is rejected by ours the same way."""
    words = _words(tmp_path, line)
    with pytest.raises(error) as theirs:
        _parse_theirs(words)
    with pytest.raises(error) as ours:
        _parse_ours(words)
    if error is ValueError:  # the message too (SystemExit's is argparse's usage line on stderr)
        assert str(ours.value) == str(theirs.value)


def _type_probe(action) -> object:
    """Compare option types by what they do: the class itself, or the results on sample words."""
    if action.type is None or isinstance(action.type, type):
        return action.type
    samples = [str(c) for c in action.choices or []] + ["true", "No", "1", "other"]
    results = []
    for word in samples:
        try:
            results.append(action.type(word))
        except Exception as err:  # the error type is the behaviour being compared
            results.append(type(err).__name__)
    return results


def _signature(action, probe_type: bool = True) -> dict:
    names = ("option_strings", "dest", "nargs", "const", "default", "required", "metavar")
    signature = {n: getattr(action, n) for n in names} | {"class": type(action).__name__}
    signature["choices"] = None if action.choices is None else list(action.choices)
    if probe_type:
        signature["type"] = _type_probe(action)
    return signature


# Options whose type differs on purpose: a dict-typed field without `str` in its union is read
# as JSON here, where transformers' parser rejects every value (see test_dict_field_reads_json).
JSON_DICT_OPTIONS = {"liger_kernel_config"}


@pytest.mark.parametrize(
    "dtypes", [ModelArgs, transformers.TrainingArguments, transformers.Seq2SeqTrainingArguments]
)
def test_options_match_transformers(dtypes):
    """Over the same dataclass both parsers build the same options."""
    ours = [_signature(a, a.dest not in JSON_DICT_OPTIONS) for a in HfArgumentParser(dtypes)._actions]
    theirs = [
        _signature(a, a.dest not in JSON_DICT_OPTIONS) for a in transformers.HfArgumentParser(dtypes)._actions
    ]
    assert [s["dest"] for s in ours] == [s["dest"] for s in theirs]
    assert ours == theirs


def test_dict_field_reads_json(tmp_path):
    """A dict-typed option takes a JSON object; transformers' parser cannot parse it at all."""
    words = _words(tmp_path, """--liger_kernel_config '{"rope": true}'""")
    with pytest.raises(SystemExit):
        _parse_theirs(words)
    _, args = _parse_ours(words, training_args=transformers.TrainingArguments)
    assert args.liger_kernel_config == {"rope": True}


def test_our_training_arguments_offer_the_same_options():
    """Our TrainingArguments yield every transformers option, with the same names, defaults and arity."""
    ours = [_signature(a, probe_type=False) for a in HfArgumentParser(TrainingArguments)._actions]
    theirs = [
        _signature(a, probe_type=False)
        for a in transformers.HfArgumentParser(transformers.TrainingArguments)._actions
    ]
    assert ours == theirs


@pytest.mark.parametrize("dtypes", [ModelArgs, transformers.TrainingArguments])
def test_help_text_matches_transformers(dtypes):
    """--help over the same dataclass reads the same as transformers'."""
    ours = HfArgumentParser(dtypes, prog="train.py").format_help()
    theirs = transformers.HfArgumentParser(dtypes, prog="train.py").format_help()
    assert ours == theirs


def test_parse_dict_parity(tmp_path):
    """parse_dict fills the dataclasses as transformers' does."""
    values = {
        "model_name_or_path": "m",
        "lora_targets": ["q"],
        "output_dir": str(tmp_path),
        "learning_rate": 0.1,
    }
    their_model, their_args = transformers.HfArgumentParser(
        (ModelArgs, transformers.TrainingArguments)
    ).parse_dict(values)
    our_model, our_args = HfArgumentParser((ModelArgs, TrainingArguments)).parse_dict(values)
    assert our_model == their_model
    assert our_args.learning_rate == their_args.learning_rate == 0.1


def test_fields_resolved_by_transformers_still_parse():
    """transformers' parser rewrites Field.type in place; ours still parses those dataclasses."""
    transformers.HfArgumentParser(ModelArgs)
    assert not isinstance(dataclasses.fields(ModelArgs)[1].type, str)
    (model,) = HfArgumentParser(ModelArgs).parse_args_into_dataclasses(
        ["--model_name_or_path", "m"], look_for_args_file=False
    )
    assert model == ModelArgs(model_name_or_path="m")
