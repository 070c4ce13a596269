"""``transformers.hf_argparser``'s path: ``HfArgumentParser`` and ``HfArg`` (home: ``hf_lightning.args``)."""

from __future__ import annotations

from hf_lightning.args import HfArg, HfArgumentParser, string_to_bool

__all__ = ["HfArg", "HfArgumentParser", "string_to_bool"]
