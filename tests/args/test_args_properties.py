"""Property: any values for any TrainingArguments fields either construct or raise ValueError/TypeError
naming one of the fields given; never another exception type."""

from __future__ import annotations

import dataclasses
import types
import typing

from hypothesis import given, settings
from hypothesis import strategies as st

from hf_lightning import TrainingArguments

HINTS = typing.get_type_hints(TrainingArguments)
FIELDS = sorted(f.name for f in dataclasses.fields(TrainingArguments) if f.init)

ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 2000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.text(max_size=4), max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(-1, 3), max_size=2),
)


def _typed(annotation) -> st.SearchStrategy:
    """Values of the field's own type (so the checks after the type check are reached too)."""
    options = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    found = []
    for option in options:
        base = typing.get_origin(option) or option
        if base is bool:
            found.append(st.booleans())
        elif base is int:
            found.append(st.integers(-3, 2000))
        elif base is float:
            found.append(st.floats(-10, 2000) | st.sampled_from([0.0, 0.5, 1.0]))
        elif base is str:
            found.append(st.text(max_size=8) | st.sampled_from(["steps", "epoch", "no", "linear", "best"]))
        elif option is type(None):
            found.append(st.none())
    return st.one_of(*found) if found else ANY_VALUE


@st.composite
def field_values(draw) -> dict:
    names = draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3, unique=True))
    return {name: draw(_typed(HINTS[name]) | ANY_VALUE) for name in names}


@settings(max_examples=300, deadline=None, database=None)
@given(values=field_values())
def test_any_field_values_construct_or_raise_an_error_naming_a_field(values):
    """Random values for up to 3 fields: the arguments construct, or ValueError/TypeError names a field."""
    values.setdefault("output_dir", "unused-output-dir")
    try:
        TrainingArguments(**values)
    except (ValueError, TypeError) as exc:
        assert any(name in str(exc) for name in values), f"{type(exc).__name__}: {exc}"
