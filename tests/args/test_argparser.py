"""HfArgumentParser: options from dataclass fields, args files, dicts, JSON and YAML files.

This module uses ``from __future__ import annotations``, so every dataclass below has string
annotations: the parser must resolve them.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from argparse import ArgumentTypeError, Namespace
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Optional, Union

import pytest

from hf_lightning.args.parser import HfArg, HfArgumentParser, string_to_bool


class Color(Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Basic:
    name: str = "model"
    steps: int = 10
    rate: float = 0.5
    fast: bool = False
    cache: bool = True
    opt_count: Optional[int] = None
    opt_flag: bool | None = None
    mode: Literal["train", "eval"] = "train"
    level: Literal[1, 2] = 1
    color: Color = Color.RED
    tags: list[str] = field(default_factory=list)
    sizes: list[int] | None = None
    kwargs_text: dict | str | None = None
    kwargs_dict: dict = field(default_factory=dict)
    learning_rate: float = field(default=1e-3, metadata={"help": "The step size.", "aliases": ["--lr", "-l"]})
    derived: int = field(default=0, init=False)


@dataclass
class Needs:
    path: str
    count: int
    items: list[int]
    choice: Literal["a", "b"]


@dataclass
class Other:
    seed: int = 0
    scheduler: Color | str = "red"


@dataclass
class Grouped:
    _argument_group_name = "grouped options"
    depth: int = 2


@dataclass
class WithHfArg:
    width: int = HfArg(default=8, aliases="-w", help="Layer width.")
    heads: list[int] = HfArg(default_factory=lambda: [1, 2], aliases=["--nh"])


@dataclass
class Mixed:
    value: Union[str, bool, None] = None


@dataclass
class BadUnion:
    value: Union[int, float] = 1


def parse(dtypes, words, **kwargs):
    """Parse ``words`` with no args file lookup."""
    return HfArgumentParser(dtypes).parse_args_into_dataclasses(words, look_for_args_file=False, **kwargs)


def test_defaults_come_from_the_fields():
    """With no words, every field keeps its dataclass default."""
    (basic,) = parse(Basic, [])
    assert basic == Basic()


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["--fast"], True),
        (["--fast", "true"], True),
        (["--fast", "YES"], True),
        (["--fast", "1"], True),
        (["--fast", "t"], True),
        (["--fast", "false"], False),
        (["--fast", "no"], False),
        (["--fast", "0"], False),
        (["--fast", "N"], False),
        ([], False),
    ],
)
def test_bool_flag_words(words, expected):
    """A bool field takes a bare flag or a truth word."""
    (basic,) = parse(Basic, words)
    assert basic.fast is expected


@pytest.mark.parametrize("words", [["--no_cache"], ["--no-cache"], ["--cache", "false"]])
def test_no_flag_turns_off_a_default_true_bool(words):
    """A bool defaulting to True also gets --no_<name> and --no-<name>."""
    (basic,) = parse(Basic, words)
    assert basic.cache is False


def test_no_flag_only_for_default_true_bools():
    """A bool defaulting to False gets no --no_<name> option."""
    options = {opt for action in HfArgumentParser(Basic)._actions for opt in action.option_strings}
    assert "--no_cache" in options
    assert "--no_fast" not in options


def test_bad_truth_word_is_an_error():
    """A word that is not a truth value is rejected by argparse."""
    with pytest.raises(SystemExit):
        parse(Basic, ["--fast", "maybe"])


@pytest.mark.parametrize(("text", "expected"), [("Yes", True), ("n", False), (True, True), (False, False)])
def test_string_to_bool(text, expected):
    """string_to_bool reads truth words in any case and passes bools through."""
    assert string_to_bool(text) is expected


def test_string_to_bool_names_the_allowed_words():
    """string_to_bool's error lists the accepted words."""
    with pytest.raises(ArgumentTypeError, match="yes/no, true/false"):
        string_to_bool("perhaps")


def test_optional_int_parses_as_int():
    """Optional[int] takes an int and defaults to None."""
    (basic,) = parse(Basic, ["--opt_count", "3"])
    assert basic.opt_count == 3
    assert parse(Basic, [])[0].opt_count is None


@pytest.mark.parametrize(("word", "expected"), [("true", True), ("no", False)])
def test_optional_bool_takes_a_word(word, expected):
    """`bool | None` with default None takes a truth word."""
    (basic,) = parse(Basic, ["--opt_flag", word])
    assert basic.opt_flag is expected


def test_optional_bool_without_word_is_an_error():
    """`bool | None` with default None needs a value, as in transformers."""
    with pytest.raises(SystemExit):
        parse(Basic, ["--opt_flag"])


@pytest.mark.parametrize(
    ("words", "mode", "level"), [(["--mode", "eval"], "eval", 1), (["--level", "2"], "train", 2)]
)
def test_literal_choices(words, mode, level):
    """Literal fields take one of their values, converted back to the value's type."""
    (basic,) = parse(Basic, words)
    assert (basic.mode, basic.level) == (mode, level)


@pytest.mark.parametrize("words", [["--mode", "predict"], ["--level", "3"], ["--color", "green"]])
def test_values_outside_the_choices_are_errors(words):
    """Literal and Enum fields reject values outside their choices."""
    with pytest.raises(SystemExit):
        parse(Basic, words)


def test_enum_gives_the_value():
    """An Enum field receives the member's value, as transformers passes it."""
    (basic,) = parse(Basic, ["--color", "blue"])
    assert basic.color == "blue"
    assert parse(Basic, [])[0].color is Color.RED


def test_union_with_str_parses_as_the_other_type():
    """`Color | str` offers the Enum's values as choices."""
    (other,) = parse(Other, ["--scheduler", "blue"])
    assert other.scheduler == "blue"
    with pytest.raises(SystemExit):
        parse(Other, ["--scheduler", "green"])


def test_union_of_two_non_str_types_is_rejected():
    """`Union[int, float]` cannot be one option, and the error names the field."""
    with pytest.raises(ValueError, match="value"):
        HfArgumentParser(BadUnion)


def test_union_of_str_bool_and_none_parses_as_str():
    """`Union[str, bool, None]` takes text (transformers' parser fails on it)."""
    (mixed,) = parse(Mixed, ["--value", "abc"])
    assert mixed.value == "abc"


@pytest.mark.parametrize(
    ("words", "tags", "sizes"),
    [(["--tags", "a", "b"], ["a", "b"], None), (["--sizes", "1", "2", "3"], [], [1, 2, 3]), ([], [], None)],
)
def test_list_fields_take_several_values(words, tags, sizes):
    """list[X] takes one or more values of X; the default_factory gives the default."""
    (basic,) = parse(Basic, words)
    assert (basic.tags, basic.sizes) == (tags, sizes)


def test_dict_or_str_field_keeps_the_json_text():
    """`dict | str | None` passes the JSON text on, as transformers does (the dataclass decodes it)."""
    (basic,) = parse(Basic, ["--kwargs_text", '{"num_cycles": 2}'])
    assert basic.kwargs_text == '{"num_cycles": 2}'


def test_dict_field_decodes_json():
    """A plain dict field is decoded from JSON (transformers cannot parse it at all)."""
    (basic,) = parse(Basic, ["--kwargs_dict", '{"a": 1, "b": [true]}'])
    assert basic.kwargs_dict == {"a": 1, "b": [True]}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_dict_field_rejects_non_objects(text):
    """A dict field rejects text that is not a JSON object."""
    with pytest.raises(SystemExit):
        parse(Basic, ["--kwargs_dict", text])


def test_required_fields_must_be_given():
    """Fields without a default are required options."""
    with pytest.raises(SystemExit):
        parse(Needs, ["--path", "p", "--count", "1", "--items", "1"])


def test_required_fields_parse():
    """Required fields of every kind parse when given."""
    (needs,) = parse(Needs, ["--path", "p", "--count", "1", "--items", "4", "5", "--choice", "b"])
    assert needs == Needs(path="p", count=1, items=[4, 5], choice="b")


@pytest.mark.parametrize("option", ["--learning_rate", "--learning-rate", "--lr", "-l"])
def test_dashed_name_and_metadata_aliases(option):
    """Each field answers to --name, --dashed-name and its metadata aliases."""
    (basic,) = parse(Basic, [option, "0.25"])
    assert basic.learning_rate == 0.25


def test_hfarg_sets_aliases_and_help():
    """HfArg puts aliases and help into the field metadata."""
    parser = HfArgumentParser(WithHfArg)
    (obj,) = parser.parse_args_into_dataclasses(["-w", "4", "--nh", "3"], look_for_args_file=False)
    assert (obj.width, obj.heads) == (4, [3])
    assert "Layer width." in parser.format_help()


def test_help_text_and_defaults_are_shown():
    """--help shows each field's metadata help and its default."""
    text = HfArgumentParser(Basic).format_help()
    assert "The step size. (default: 0.001)" in " ".join(text.split())


def test_init_false_fields_get_no_option():
    """Fields with init=False are not options."""
    dests = {action.dest for action in HfArgumentParser(Basic)._actions}
    assert "derived" not in dests
    assert "learning_rate" in dests


def test_several_dataclasses_in_order():
    """Each dataclass type yields one instance, in the order given."""
    basic, other = parse([Basic, Other], ["--steps", "3", "--seed", "7"])
    assert (basic.steps, other.seed) == (3, 7)


def test_argument_group_name():
    """A dataclass with _argument_group_name gets its own help section."""
    parser = HfArgumentParser((Basic, Grouped))
    assert "grouped options:" in parser.format_help()
    assert parser.parse_args_into_dataclasses(["--depth", "5"], look_for_args_file=False)[1].depth == 5


def test_unknown_words_raise_naming_them():
    """Words no option takes raise ValueError naming them."""
    with pytest.raises(ValueError, match=r"\['--bogus', '1'\]"):
        parse(Basic, ["--steps", "2", "--bogus", "1"])


def test_remaining_strings_are_returned():
    """return_remaining_strings gives the unused words as the last element."""
    basic, rest = parse(Basic, ["--bogus", "1", "--steps", "2"], return_remaining_strings=True)
    assert (basic.steps, rest) == (2, ["--bogus", "1"])


def test_extra_options_come_back_as_a_namespace():
    """Options added with add_argument come back as one extra Namespace."""
    parser = HfArgumentParser(Basic)
    parser.add_argument("--extra", type=int, default=0)
    basic, extra = parser.parse_args_into_dataclasses(["--extra", "4"], look_for_args_file=False)
    assert isinstance(basic, Basic)
    assert extra == Namespace(extra=4)


def test_future_annotations_are_resolved():
    """String annotations (this module's) are resolved to real types."""
    assert isinstance(Basic.__dataclass_fields__["steps"].type, str)
    (basic,) = parse(Basic, ["--steps", "5"])
    assert basic.steps == 5


def test_unresolvable_annotation_is_a_clear_error():
    """A string annotation naming a type out of reach raises RuntimeError naming the class."""

    class Local:
        pass

    @dataclass
    class UsesLocal:
        thing: Local | None = None

    with pytest.raises(RuntimeError, match="UsesLocal"):
        HfArgumentParser(UsesLocal)


@pytest.fixture
def script(tmp_path, monkeypatch):
    """Pretend the running script is tmp_path/train.py, with no command-line words."""
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "train.py")])
    return tmp_path


def test_script_args_file_is_read(script):
    """<script>.args beside the script supplies words; the command line wins over it."""
    (script / "train.args").write_text("--steps 4\n--name from_file\n")
    (basic,) = HfArgumentParser(Basic).parse_args_into_dataclasses(["--steps", "9"])
    assert (basic.steps, basic.name) == (9, "from_file")


def test_script_args_file_can_be_ignored(script):
    """look_for_args_file=False skips <script>.args."""
    (script / "train.args").write_text("--steps 4")
    (basic,) = HfArgumentParser(Basic).parse_args_into_dataclasses([], look_for_args_file=False)
    assert basic.steps == 10


def test_args_filename_replaces_the_script_file(script):
    """args_filename is read instead of <script>.args."""
    (script / "train.args").write_text("--steps 4 --rate 0.1")
    (script / "other.args").write_text("--steps 6")
    (basic,) = HfArgumentParser(Basic).parse_args_into_dataclasses([], args_filename=script / "other.args")
    assert (basic.steps, basic.rate) == (6, 0.5)


def test_args_file_flag_files_override_in_order(script):
    """Files named by args_file_flag follow the script file; the last one wins, the command line wins over all."""
    (script / "train.args").write_text("--steps 1 --rate 0.1 --name base")
    (script / "a.args").write_text("--steps 2 --rate 0.2")
    (script / "b.args").write_text("--steps 3")
    words = ["--cfg", str(script / "a.args"), "--cfg", str(script / "b.args"), "--name", "cli"]
    (basic,) = HfArgumentParser(Basic).parse_args_into_dataclasses(words, args_file_flag="--cfg")
    assert (basic.steps, basic.rate, basic.name) == (3, 0.2, "cli")


def test_dashed_args_file_flag(script):
    """args_file_flag may be spelled with dashes."""
    (script / "a.args").write_text("--steps 2")
    words = ["--args-file", str(script / "a.args")]
    (basic,) = HfArgumentParser(Basic).parse_args_into_dataclasses(words, args_file_flag="--args-file")
    assert basic.steps == 2


def test_help_still_works_with_args_file_flag(script, capsys):
    """-h prints the dataclass options even when args_file_flag is given."""
    with pytest.raises(SystemExit) as exit_info:
        HfArgumentParser(Basic).parse_args_into_dataclasses(["-h"], args_file_flag="--cfg")
    assert exit_info.value.code == 0
    assert "--learning_rate" in capsys.readouterr().out


def test_no_script_name_means_no_args_file(monkeypatch):
    """An empty sys.argv[0] (an interactive session) looks for no args file."""
    monkeypatch.setattr(sys, "argv", [""])
    (basic,) = HfArgumentParser(Basic).parse_args_into_dataclasses(["--steps", "2"])
    assert basic.steps == 2


def test_sys_argv_is_parsed_by_default(script, monkeypatch):
    """With args=None the words come from sys.argv[1:]."""
    monkeypatch.setattr(sys, "argv", [str(script / "train.py"), "--steps", "8"])
    (basic,) = HfArgumentParser(Basic).parse_args_into_dataclasses()
    assert basic.steps == 8


def test_parse_dict():
    """parse_dict fills each dataclass with its own keys."""
    basic, other = HfArgumentParser([Basic, Other]).parse_dict({"steps": 3, "seed": 5, "tags": ["x"]})
    assert (basic.steps, basic.tags, other.seed) == (3, ["x"], 5)


def test_parse_dict_names_extra_keys():
    """parse_dict raises ValueError naming the keys no field takes."""
    with pytest.raises(ValueError, match=r"\['unknown_a', 'unknown_b'\]"):
        HfArgumentParser(Basic).parse_dict({"steps": 3, "unknown_b": 1, "unknown_a": 2})


def test_parse_dict_allows_extra_keys_on_request():
    """allow_extra_keys=True ignores keys no field takes."""
    (basic,) = HfArgumentParser(Basic).parse_dict({"steps": 3, "unknown": 1}, allow_extra_keys=True)
    assert basic.steps == 3


def test_parse_json_file(tmp_path):
    """parse_json_file reads a JSON object of field values."""
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"name": "j", "fast": True, "sizes": [1, 2]}))
    (basic,) = HfArgumentParser(Basic).parse_json_file(path)
    assert (basic.name, basic.fast, basic.sizes) == ("j", True, [1, 2])


def test_parse_json_file_extra_keys(tmp_path):
    """parse_json_file names keys no field takes, unless allow_extra_keys."""
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"name": "j", "nope": 1}))
    with pytest.raises(ValueError, match="nope"):
        HfArgumentParser(Basic).parse_json_file(path)
    assert HfArgumentParser(Basic).parse_json_file(str(path), allow_extra_keys=True)[0].name == "j"


def test_parse_yaml_file(tmp_path):
    """parse_yaml_file reads a YAML mapping of field values."""
    path = tmp_path / "args.yaml"
    path.write_text("name: y\nrate: 0.25\ntags: [a, b]\nseed: 3\n")
    basic, other = HfArgumentParser([Basic, Other]).parse_yaml_file(path)
    assert (basic.name, basic.rate, basic.tags, other.seed) == ("y", 0.25, ["a", "b"], 3)


def test_parse_yaml_file_extra_keys(tmp_path):
    """parse_yaml_file names keys no field takes."""
    path = tmp_path / "args.yaml"
    path.write_text("name: y\nextra_key: 1\n")
    with pytest.raises(ValueError, match="extra_key"):
        HfArgumentParser(Basic).parse_yaml_file(path)


@pytest.mark.parametrize("text", ["", "- a\n- b\n"])
def test_yaml_file_must_hold_a_mapping(tmp_path, text):
    """An empty or non-mapping YAML file raises ValueError naming the file."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match="bad.yaml"):
        HfArgumentParser(Basic).parse_yaml_file(path)


@pytest.mark.parametrize("dtypes", [Basic, [Basic], (Basic,), iter([Basic])])
def test_dataclass_types_single_or_iterable(dtypes):
    """dataclass_types may be one type or any iterable of types."""
    assert HfArgumentParser(dtypes).dataclass_types == [Basic]


def test_fields_are_not_mutated():
    """Building a parser leaves the dataclass fields' annotations as they were."""
    before = [f.type for f in dataclasses.fields(Basic)]
    HfArgumentParser(Basic)
    assert [f.type for f in dataclasses.fields(Basic)] == before


@pytest.mark.parametrize("name", ["TrainingArguments", "Seq2SeqTrainingArguments"])
def test_help_of_the_training_arguments_prints_and_exits_0(name, capsys):
    """`script.py --help` prints every option and exits 0, as transformers' parser does (argparse formats
    each help text with `%`, so a stray percent sign would crash it)."""
    import hf_lightning

    parser = HfArgumentParser(getattr(hf_lightning, name))
    with pytest.raises(SystemExit) as exited:
        parser.parse_args_into_dataclasses(args=["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "--auto_find_batch_size" in out and "--output_dir" in out
