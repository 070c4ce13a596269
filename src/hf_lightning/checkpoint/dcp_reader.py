"""Reading a distributed checkpoint (``torch.distributed.checkpoint``) without unpickling arbitrary code.

A DCP folder's ``.metadata`` is a pickle. It is read here by an unpickler that knows only the classes
such metadata is made of; a planted or damaged file raises :class:`CheckpointError` naming it, and its
code never runs. The shards themselves are read by DCP with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import enum
import io
import os
import pickle
import warnings
from typing import Any

import torch

from hf_lightning.checkpoint.io import CheckpointError

__all__ = ["METADATA", "dcp_load"]

METADATA = ".metadata"


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


_ALLOWEDMETADATA = {
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("collections", "OrderedDict"),
}


def _enum_member(cls: Any, name: str) -> Any:
    """``getattr`` as some Python versions pickle an enum member, limited to that: a public member of an
    ``Enum`` class (which the unpickler only gets from the allowed modules)."""
    if (
        isinstance(cls, type)
        and issubclass(cls, enum.Enum)
        and not name.startswith("_")
        and name in cls.__members__
    ):
        return cls[name]
    raise pickle.UnpicklingError(f"`getattr({cls!r}, {name!r})` is not part of a checkpoint's metadata")


class _MetadataUnpickler(pickle.Unpickler):
    """Only the classes a distributed checkpoint's ``.metadata`` is made of; anything else is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("builtins", "getattr"):
            return _enum_member  # Python 3.11.2 pickles `_MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT` so
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if module == "torch.distributed.checkpoint.metadata" or (module, name) in _ALLOWEDMETADATA:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"`{module}.{name}` is not part of a checkpoint's metadata")


def _reader(path: str) -> Any:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        """``FileSystemReader`` whose ``.metadata`` is read by :class:`_MetadataUnpickler`."""

        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            file = os.path.join(path, METADATA)
            try:
                with open(file, "rb") as handle:
                    metadata = _MetadataUnpickler(io.BytesIO(handle.read())).load()
            except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError) as exc:
                raise CheckpointError(
                    f"`{file}` is not a readable checkpoint metadata file: {exc}", file
                ) from exc
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(path)


def dcp_load(state: dict[str, Any], path: str) -> None:
    """Fill ``state`` (a template: names and shapes) from the DCP folder ``path``; errors are :class:`CheckpointError`."""
    import torch.distributed.checkpoint as dcp

    if not os.path.isfile(os.path.join(path, METADATA)):
        raise CheckpointError(f"`{path}` is not a distributed checkpoint (it has no {METADATA})", path)
    from torch.distributed.checkpoint.api import CheckpointException

    reader = _reader(path)
    reader.read_metadata()  # a foreign or damaged .metadata is named here, before DCP wraps the error
    single = not _distributed()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*assuming the intent is to")  # one process: intended
            dcp.load(state, storage_reader=reader, no_dist=single)  # one process reads every shard
    except (Exception, CheckpointException) as exc:  # DCP wraps each rank's failure (a BaseException)
        detail = str(exc).strip().splitlines()[-1]
        raise CheckpointError(
            f"The distributed checkpoint `{path}` could not be loaded: {detail}", path
        ) from exc
