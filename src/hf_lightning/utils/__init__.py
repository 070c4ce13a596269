"""Utilities in the shape of ``transformers.utils``: ``hf_lightning.utils.logging``."""

from __future__ import annotations

from hf_lightning.utils import logging

__all__ = ["logging"]
