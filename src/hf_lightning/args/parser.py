"""`HfArgumentParser`: command lines, dicts, JSON and YAML files into dataclasses.

An ``argparse.ArgumentParser`` that reads the fields of one or more dataclasses (for example
``TrainingArguments``) and adds one option per field, with the behaviour of ``transformers``'
parser, so that training scripts written for it keep their command lines:

* every ``init`` field becomes ``--field_name`` (plus ``--field-name`` when the name holds an
  underscore and any ``metadata["aliases"]``); the rest of ``field.metadata`` (``help``,
  ``choices``, ``nargs``, ...) is passed to ``add_argument``;
* ``bool`` fields accept ``--flag``, ``--flag false`` (yes/no, true/false, t/f, y/n, 1/0), and a
  field whose default is ``True`` also gets ``--no_flag``;
* ``Optional[X]`` and ``X | None`` parse as ``X``; a union with ``str`` parses as its other type
  (``SchedulerType | str`` offers the scheduler names; ``dict | str | None`` takes the JSON text
  that the dataclass decodes itself);
* ``Literal[...]`` and ``Enum`` fields offer their values as choices (an ``Enum`` field receives
  the value, which the dataclass converts);
* ``list[X]`` takes one or more values; fields without a default are required.

Where ``transformers`` fails, this parser does the obvious thing instead: a ``dict``-typed field
without ``str`` in its union is decoded from JSON, a union that keeps ``str`` among several types
parses as ``str``, a ``Literal``/``Enum`` field with a ``default_factory`` is optional,
``args_file_flag`` may be spelled with dashes, ``-h`` next to it still prints the help, an empty
``sys.argv[0]`` looks for no args file, and a YAML file that does not hold a mapping raises a
``ValueError`` naming the file.

Engine-free: the standard library and PyYAML only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import types
import typing
from argparse import ArgumentDefaultsHelpFormatter, ArgumentParser, ArgumentTypeError, Namespace
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from inspect import isclass
from pathlib import Path
from typing import Any, Literal, Union

import yaml

__all__ = ["HfArg", "HfArgumentParser", "string_to_bool"]

_TRUE_WORDS = ("yes", "true", "t", "y", "1")
_FALSE_WORDS = ("no", "false", "f", "n", "0")
_NONE_TYPE = type(None)


def string_to_bool(v: str | bool) -> bool:
    """Read a command-line truth value: yes/no, true/false, t/f, y/n or 1/0, in any case (``v``: transformers'
    parameter name)."""
    if isinstance(v, bool):
        return v
    if v.lower() in _TRUE_WORDS:
        return True
    if v.lower() in _FALSE_WORDS:
        return False
    raise ArgumentTypeError(
        f"Truthy value expected: got {v!r}; choose one of yes/no, true/false, t/f, y/n, 1/0 (any case)."
    )


def _choice_type(choices: Iterable[Any]) -> Callable[[str], Any]:
    """Map the text of each choice back to the choice; other text passes through for argparse to reject."""
    by_text = {str(choice): choice for choice in choices}
    return lambda text: by_text.get(text, text)


def _json_dict(text: str) -> dict:
    """Decode a JSON object given on the command line for a ``dict``-typed field."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ArgumentTypeError(
            f"expected a JSON object such as '{{\"key\": 1}}', got {text!r} ({err})"
        ) from None
    if not isinstance(value, dict):
        raise ArgumentTypeError(f"expected a JSON object such as '{{\"key\": 1}}', got {text!r}")
    return value


def HfArg(
    *,
    aliases: str | list[str] | None = None,
    help: str | None = None,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    metadata: dict | None = None,
    **kwargs: Any,
) -> dataclasses.Field:
    """A ``dataclasses.field`` with ``aliases`` and ``help`` written as keywords instead of metadata."""
    metadata = dict(metadata or {})
    if aliases is not None:
        metadata["aliases"] = aliases
    if help is not None:
        metadata["help"] = help
    return dataclasses.field(metadata=metadata, default=default, default_factory=default_factory, **kwargs)


def _is_union(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return origin is Union or origin is types.UnionType


def _narrow_union(name: str, annotation: Any) -> Any:
    """Reduce a union annotation to the single type its option parses (``transformers``' rules)."""
    members = typing.get_args(annotation)
    if str not in members and (len(members) != 2 or _NONE_TYPE not in members):
        raise ValueError(
            f"Field `{name}: {annotation}` is not supported by HfArgumentParser: a union must be "
            "`Optional[X]` (`X | None`) or include `str`, since an option parses one type."
        )
    if _NONE_TYPE not in members:
        first, second = members[:2]
        return first if second is str else second
    if bool not in members:
        first, second = members[:2]
        return first if second is _NONE_TYPE else second
    if len(members) == 2:
        return annotation  # Optional[bool]: handled as a flag
    return str  # bool, str and None together: the text is all one option can carry


def _is_bool(annotation: Any) -> bool:
    return annotation is bool or annotation == (bool | None)


def _is_choice(annotation: Any) -> bool:
    if typing.get_origin(annotation) is Literal:
        return True
    return isinstance(annotation, type) and issubclass(annotation, Enum)


def _default_kwargs(field: dataclasses.Field) -> dict[str, Any]:
    """The argparse default of a field, or ``required=True`` when the field has none."""
    if field.default is not dataclasses.MISSING:
        return {"default": field.default}
    if field.default_factory is not dataclasses.MISSING:
        return {"default": field.default_factory()}
    return {"required": True}


def _type_kwargs(field: dataclasses.Field, annotation: Any) -> dict[str, Any]:
    """The argparse keywords (type, nargs, choices, default) that the field's annotation implies."""
    origin = typing.get_origin(annotation) or annotation
    if _is_choice(annotation):
        choices: Sequence[Any]
        if origin is Literal:
            choices = typing.get_args(annotation)
        else:
            choices = [member.value for member in annotation]
        return {"choices": choices, "type": _choice_type(choices), **_default_kwargs(field)}
    if _is_bool(annotation):
        kwargs: dict[str, Any] = {"type": string_to_bool}
        if annotation is bool or (field.default is not None and field.default is not dataclasses.MISSING):
            kwargs["default"] = False if field.default is dataclasses.MISSING else field.default
            kwargs.update(nargs="?", const=True)
        return kwargs
    if isclass(origin) and issubclass(origin, list):
        element = typing.get_args(annotation)[0] if typing.get_args(annotation) else str
        kwargs = {"type": element, "nargs": "+"}
        if field.default_factory is not dataclasses.MISSING:
            kwargs["default"] = field.default_factory()
        elif field.default is dataclasses.MISSING:
            kwargs["required"] = True
        # A plain default (such as `debug: str | list[DebugOption] = ""`) stays out of argparse, which
        # would run a string default through the element type; the dataclass gets None, as in transformers.
        return kwargs
    if isclass(origin) and issubclass(origin, dict):
        return {"type": _json_dict, **_default_kwargs(field)}
    return {"type": annotation, **_default_kwargs(field)}


def _add_field_option(parser: Any, field: dataclasses.Field, annotation: Any) -> None:
    """Add the option(s) of one dataclass field to ``parser`` (a parser or an argument group)."""
    options = [f"--{field.name}"]
    if "_" in field.name:
        options.append(f"--{field.name.replace('_', '-')}")
    metadata = dict(field.metadata)
    aliases = metadata.pop("aliases", [])
    if isinstance(aliases, str):
        aliases = [aliases]
    if _is_union(annotation):
        annotation = _narrow_union(field.name, annotation)
    parser.add_argument(*options, *aliases, **{**metadata, **_type_kwargs(field, annotation)})
    if field.default is True and _is_bool(annotation):
        # Added after the main option: both write the same destination, and order matters there.
        parser.add_argument(
            f"--no_{field.name}",
            f"--no-{field.name.replace('_', '-')}",
            **{**metadata, "action": "store_false", "dest": field.name, "default": False},
        )


def _read_args_files(paths: Iterable[Path]) -> list[str]:
    """The whitespace-separated words of each existing args file, in order."""
    words: list[str] = []
    for path in paths:
        if path.exists():
            words += path.read_text().split()
    return words


def _script_args_file() -> Path | None:
    """``<script>.args`` beside the running script, or None when there is no script name."""
    if not sys.argv or not Path(sys.argv[0]).name:
        return None
    return Path(sys.argv[0]).with_suffix(".args")


def _pop_flagged_files(args: list[str] | None, flag: str) -> tuple[list[Path], list[str]]:
    """Take every ``flag PATH`` pair out of ``args``; return the paths and the remaining words."""
    flag_parser = ArgumentParser(add_help=False, allow_abbrev=False)
    action = flag_parser.add_argument(flag, type=str, action="append")
    found, rest = flag_parser.parse_known_args(args=args)
    return [Path(p) for p in getattr(found, action.dest) or []], rest


class HfArgumentParser(ArgumentParser):
    """An ``ArgumentParser`` whose options are the fields of the given dataclass types.

    Args:
        dataclass_types: one dataclass type or an iterable of them; each parse returns one instance
            of each, in this order. A type with an ``_argument_group_name`` attribute gets its own
            argument group in ``--help``.
        **kwargs: passed to ``argparse.ArgumentParser`` (the help shows defaults unless
            ``formatter_class`` is given).

    Options added to the parser afterwards with ``add_argument`` come back from
    :meth:`parse_args_into_dataclasses` as one extra ``Namespace`` after the dataclasses.
    """

    dataclass_types: list[type]

    def __init__(self, dataclass_types: type | Iterable[type] | None = None, **kwargs: Any) -> None:
        if dataclass_types is None:
            dataclass_types = []
        elif dataclasses.is_dataclass(dataclass_types) or not isinstance(dataclass_types, Iterable):
            dataclass_types = [dataclass_types]
        kwargs.setdefault("formatter_class", ArgumentDefaultsHelpFormatter)
        super().__init__(**kwargs)
        self.dataclass_types = list(dataclass_types)
        for dtype in self.dataclass_types:
            self._add_dataclass_arguments(dtype)

    def _add_dataclass_arguments(self, dtype: type) -> None:
        group_name = getattr(dtype, "_argument_group_name", None)
        target = self.add_argument_group(group_name) if group_name is not None else self
        try:
            hints = typing.get_type_hints(dtype)
        except NameError as err:
            raise RuntimeError(
                f"HfArgumentParser could not resolve the annotations of {dtype.__qualname__} ({err}). "
                "Define the dataclass and the types it names at module level, or remove "
                "`from __future__ import annotations` from its module."
            ) from err
        for field in dataclasses.fields(dtype):
            if field.init:
                _add_field_option(target, field, hints.get(field.name, field.type))

    def _split_namespace(self, namespace: Namespace) -> list[Any]:
        """One dataclass instance per type from ``namespace``, plus a Namespace of any other options."""
        values = vars(namespace)
        outputs: list[Any] = []
        for dtype in self.dataclass_types:
            names = [f.name for f in dataclasses.fields(dtype) if f.init]
            outputs.append(dtype(**{name: values.pop(name) for name in names if name in values}))
        if values:
            outputs.append(namespace)
        return outputs

    def parse_args_into_dataclasses(
        self,
        args: Iterable[str] | None = None,
        return_remaining_strings: bool = False,
        look_for_args_file: bool = True,
        args_filename: str | os.PathLike | None = None,
        args_file_flag: str | None = None,
    ) -> tuple[Any, ...]:
        """Parse command-line words (``sys.argv[1:]`` by default) into one instance per dataclass type.

        Args:
            args: the words to parse; ``None`` reads ``sys.argv[1:]``.
            return_remaining_strings: also return the words no option took, as the last element,
                instead of raising ``ValueError`` on them.
            look_for_args_file: prepend the words of ``<script>.args`` beside the running script,
                when that file exists.
            args_filename: read this file instead of ``<script>.args``.
            args_file_flag: an option (such as ``"--args_file"``) naming more args files on the
                command line; it may repeat, and later files win over earlier ones.

        Words are read in the order: default or ``args_filename`` file, flagged files, then the
        command line, so that a later occurrence of an option overrides an earlier one.
        """
        args = None if args is None else list(args)
        default_file = _script_args_file() if look_for_args_file else None
        if args_file_flag or args_filename or default_file is not None:
            files = [Path(args_filename)] if args_filename else [default_file] if default_file else []
            if args_file_flag:
                flagged, args = _pop_flagged_files(args, args_file_flag)
                files += flagged
            args = _read_args_files(files) + (args if args is not None else sys.argv[1:])
        namespace, remaining = self.parse_known_args(args=args)
        outputs = self._split_namespace(namespace)
        if return_remaining_strings:
            return (*outputs, remaining)
        if remaining:
            raise ValueError(f"Some specified arguments are not used by the HfArgumentParser: {remaining}")
        return tuple(outputs)

    def parse_dict(self, args: dict[str, Any], allow_extra_keys: bool = False) -> tuple[Any, ...]:
        """Build one instance per dataclass type from a dict of field values, without argparse.

        Raises ``ValueError`` naming the keys that no dataclass field takes, unless
        ``allow_extra_keys``.
        """
        if not isinstance(args, dict):
            raise ValueError(f"HfArgumentParser.parse_dict expects a dict, got {type(args).__name__}")
        field_names = {f.name for dtype in self.dataclass_types for f in dataclasses.fields(dtype) if f.init}
        unused = sorted(set(args) - field_names)
        if unused and not allow_extra_keys:
            raise ValueError(
                f"Some keys are not used by the HfArgumentParser: {unused}. "
                "Pass allow_extra_keys=True to ignore them."
            )
        outputs = []
        for dtype in self.dataclass_types:
            names = {f.name for f in dataclasses.fields(dtype) if f.init}
            outputs.append(dtype(**{k: v for k, v in args.items() if k in names}))
        return tuple(outputs)

    def parse_json_file(
        self, json_file: str | os.PathLike, allow_extra_keys: bool = False
    ) -> tuple[Any, ...]:
        """Build one instance per dataclass type from a JSON file holding an object of field values."""
        data = json.loads(Path(json_file).read_text(encoding="utf-8"))
        return self._parse_file_data(data, json_file, allow_extra_keys)

    def parse_yaml_file(
        self, yaml_file: str | os.PathLike, allow_extra_keys: bool = False
    ) -> tuple[Any, ...]:
        """Build one instance per dataclass type from a YAML file holding a mapping of field values."""
        data = yaml.safe_load(Path(yaml_file).read_text(encoding="utf-8"))
        return self._parse_file_data(data, yaml_file, allow_extra_keys)

    def _parse_file_data(self, data: Any, path: str | os.PathLike, allow_extra_keys: bool) -> tuple[Any, ...]:
        if not isinstance(data, dict):
            raise ValueError(
                f"HfArgumentParser expects {os.fspath(path)!r} to hold a mapping of field names to values, "
                f"got {type(data).__name__}"
            )
        return self.parse_dict(data, allow_extra_keys=allow_extra_keys)
