"""Content checks of a checkpoint folder: every file parses, and matches the checksums taken when it was saved.

A save writes ``checkpoint-manifest.json`` last, just before the folder is published: the size and
checksum of every other file (format 2: XXH3-128, taken while the files were written, see
:mod:`hf_lightning.checkpoint.hashing`; format 1, written by earlier versions: SHA-256, still verified).
:func:`content_problem` then finds a truncated file, a flipped bit or a deleted file in a checkpoint
written here, reading each file once (several files at a time). A folder without a manifest (written by transformers, or by an older
version) gets the structural checks only: each ``.safetensors`` header parses and its tensors lie inside
the file, each JSON file parses, ``trainer_state.json`` names the folder's step, each ``.pt`` / ``.pth``
/ ``.bin`` file loads under ``torch.load(weights_only=True)``.

Each check returns a sentence naming the file and what is wrong with it, or ``None``.
"""

from __future__ import annotations

import json
import os
import re
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from hf_lightning.checkpoint.hashing import ALGORITHM, file_entry
from hf_lightning.checkpoint.io import CheckpointError, safe_torch_load
from hf_lightning.checkpoint.sealing import listed_files

__all__ = [
    "MANIFEST_NAME",
    "OPTIONAL_STATE_FILES",
    "content_problem",
    "missing_listed_files",
    "read_manifest",
    "verify_model_files",
    "write_manifest",
]

MANIFEST_NAME = "checkpoint-manifest.json"
_FORMAT = 2  # 1: {"size", "sha256"} per file; 2: {"size", <algorithm>} with the algorithm named on top
_STEP_RE = re.compile(r"checkpoint-(\d+)$")
# Files a resume can do without (fresh optimizer / schedule / scaler, unrestored RNG), with a warning.
OPTIONAL_STATE_FILES = ("optimizer.pt", "scheduler.pt", "scaler.pt")
_TORCH_SUFFIXES = (".pt", ".pth", ".bin")
# training_args.bin written by transformers holds a pickled object that weights_only refuses; it is never
# read when resuming, so it is not checked.
_NOT_LOADED = ("training_args.bin",)


_files = listed_files  # every file a manifest lists (checkpoint/sealing.py)


def _entries_of(folder: str, rels: list[str], algorithm: str) -> dict[str, dict[str, Any]]:
    """``{rel: {"size", algorithm}}`` of the given files, several read at a time (hashing releases the GIL)."""
    paths = [os.path.join(folder, rel) for rel in rels]
    if len(paths) < 2:
        return {rel: file_entry(path, algorithm) for rel, path in zip(rels, paths)}
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1, len(paths))) as pool:
        found = pool.map(lambda path: file_entry(path, algorithm), paths)
        return dict(zip(rels, found))


def write_manifest(folder: str | os.PathLike[str], entries: dict[str, dict[str, Any]] | None = None) -> str:
    """Write ``folder/checkpoint-manifest.json`` with the size and checksum of every other file; returns it.

    ``entries`` are checksums already taken (while the files were written, :mod:`checkpoint.sealing`):
    one whose size still matches its file is recorded as is; every other file is hashed here.
    """
    folder = os.fspath(folder)
    known = {}
    for rel in _files(folder):
        entry = (entries or {}).get(rel)
        if entry is not None and ALGORITHM in entry:
            if entry["size"] == os.path.getsize(os.path.join(folder, rel)):
                known[rel] = {"size": entry["size"], ALGORITHM: entry[ALGORITHM]}
    rest = [rel for rel in _files(folder) if rel not in known]
    files = {**known, **_entries_of(folder, rest, ALGORITHM)}
    path = os.path.join(folder, MANIFEST_NAME)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(
            {"format": _FORMAT, "algorithm": ALGORITHM, "files": files}, handle, indent=1, sort_keys=True
        )
        handle.write("\n")
    return path


def _layout_ok(data: Any) -> bool:
    files = data["files"]
    if data["format"] == 1:
        algorithm = "sha256"
    elif data["format"] == _FORMAT:
        algorithm = data["algorithm"]
    else:
        return False
    return isinstance(files, dict) and all(
        isinstance(e, dict) and isinstance(e["size"], int) and isinstance(e[algorithm], str)
        for e in files.values()
    )


def read_manifest(folder: str | os.PathLike[str]) -> dict[str, dict[str, Any]] | None:
    """The manifest's ``{file: {"size", <algorithm>: digest}}`` (``"sha256"`` in format 1, the manifest's
    ``"algorithm"`` in format 2), ``None`` when the folder has none.

    Raises :class:`CheckpointError` naming the manifest when it does not parse or has another shape.
    """
    path = os.path.join(os.fspath(folder), MANIFEST_NAME)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        ok = _layout_ok(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"`{path}` is corrupt ({type(exc).__name__}: {exc}).", path) from exc
    if not ok:
        raise CheckpointError(f"`{path}` is corrupt (unexpected layout).", path)
    return data["files"]


def missing_listed_files(folder: str | os.PathLike[str]) -> list[str]:
    """The files the manifest lists that are gone from ``folder`` (``[]`` without a manifest)."""
    folder = os.fspath(folder)
    try:
        listed = read_manifest(folder) or {}
    except CheckpointError:
        return []
    return sorted(rel for rel in listed if not os.path.isfile(os.path.join(folder, rel)))


def _algorithm(listed: dict[str, dict[str, Any]]) -> str:
    """The one checksum algorithm of a manifest's entries (the key beside ``"size"``)."""
    names = {key for entry in listed.values() for key in entry if key != "size"}
    return names.pop() if len(names) == 1 else ALGORITHM


def _checksum_problem(folder: str, listed: dict[str, dict[str, Any]]) -> str | None:
    found = _first_problem(folder, listed, sorted(listed))
    return None if found is None else found[1]


def _first_problem(folder: str, listed: dict[str, dict[str, Any]], rels: list[str]) -> tuple[str, str] | None:
    """``(rel, problem)`` of the first of the manifest's files ``rels`` that is gone, has another size or
    another checksum; ``None`` when all match. The files are hashed several at a time."""
    present = [rel for rel in rels if os.path.isfile(os.path.join(folder, rel))]
    sized = [rel for rel in present if os.path.getsize(os.path.join(folder, rel)) == listed[rel]["size"]]
    algorithm = _algorithm(listed)
    try:
        found = _entries_of(folder, sized, algorithm)
    except CheckpointError as exc:  # an algorithm this process cannot compute
        return (
            MANIFEST_NAME,
            f"`{os.path.join(folder, MANIFEST_NAME)}` cannot be verified: {str(exc).rstrip('.')}",
        )
    for rel in rels:
        problem = _entry_problem(folder, rel, listed[rel], found.get(rel), algorithm)
        if problem is not None:
            return rel, problem
    return None


def _entry_problem(
    folder: str, rel: str, entry: dict[str, Any], found: dict[str, Any] | None, algorithm: str
) -> str | None:
    """What is wrong with the manifest's file ``rel`` (gone, another size, another checksum), or ``None``;
    ``found`` is its entry as hashed now (``None`` when it was not: gone, or of another size)."""
    path = os.path.join(folder, rel)
    if not os.path.isfile(path):
        if os.path.basename(rel) in OPTIONAL_STATE_FILES or _is_rng_file(rel):
            return None  # reported by missing_listed_files: the caller decides
        if _WEIGHTS_FILE_RE.match(rel) and _complete_weights(folder):
            return (
                None  # the weights were laid out again (one file <-> index and shards): checked by structure
            )
        return f"`{path}` was saved with the checkpoint but is missing"
    if found is None:
        size = os.path.getsize(path)
        problem = f"`{path}` is truncated or corrupt: {size} bytes, {entry['size']} were saved"
    elif found[algorithm] != entry[algorithm]:
        name = {"sha256": "SHA-256", "xxh3_128": "XXH3-128 checksum"}.get(algorithm, algorithm)
        problem = f"`{path}` is corrupt: its {name} differs from the one recorded when it was saved"
    else:
        return None
    return _file_problem(folder, rel) or problem  # the file's own check says more, when it fails


# What a model load never reads: the training state of the checkpoint (an engine's optimizer shards too).
_TRAINING_STATE = (*OPTIONAL_STATE_FILES, "trainer_state.json", "training_args.bin", "training_args.json",
                   "optimizer.bin", "latest", "zero_to_fp32.py")  # fmt: skip
_ENGINE_STATE_RE = re.compile(r"^(global_step\d+|optimizer_\d+)/")  # DeepSpeed's engine, FSDP's optimizer


def verify_model_files(folder: str | os.PathLike[str]) -> None:
    """Before weights are loaded back from ``folder`` (the best model, a resume): raise
    :class:`CheckpointError` naming the file when one that a model load reads (weights, index, shards,
    config, adapter files; not the optimizer, scheduler, RNG or trainer state) differs from its manifest
    entry or fails its structural check.

    A folder written here that lost its manifest is refused (nothing could be checked); one without
    ``training_args.json`` and manifest (written by transformers) gets the structural checks only.
    """
    folder = os.fspath(folder)
    listed = read_manifest(folder)  # a corrupt manifest: CheckpointError naming it
    if listed is None and os.path.isfile(os.path.join(folder, "training_args.json")):
        path = os.path.join(folder, MANIFEST_NAME)
        raise CheckpointError(f"`{path}` was saved with the checkpoint but is missing", path)
    rels = [
        rel
        for rel in sorted(listed if listed is not None else _files(folder))
        if not (os.path.basename(rel) in _TRAINING_STATE or _is_rng_file(rel) or _ENGINE_STATE_RE.match(rel))
    ]
    if listed is not None:
        found = _first_problem(folder, listed, rels)
        if found is not None:
            raise CheckpointError(found[1] + ".", os.path.join(folder, found[0]))
        return
    for rel in rels:
        problem = _file_problem(folder, rel)
        if problem is not None:
            raise CheckpointError(problem + ".", os.path.join(folder, rel))


# transformers' model weight files: one file, an index, or a shard of an index
_WEIGHTS_FILE_RE = re.compile(r"(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)(\.index\.json)?$")
_WEIGHTS_NAMES = ("model.safetensors", "pytorch_model.bin")


def _complete_weights(folder: str) -> bool:
    """Whether ``folder`` holds whole model weights in one of transformers' layouts: a single weights
    file, or an index whose every shard is there."""
    for name in _WEIGHTS_NAMES:
        if os.path.isfile(os.path.join(folder, name)):
            return True
        index = os.path.join(folder, name + ".index.json")
        if os.path.isfile(index):
            try:
                with open(index, encoding="utf-8") as handle:
                    shards = set(json.load(handle)["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return False
            return bool(shards) and all(os.path.isfile(os.path.join(folder, shard)) for shard in shards)
    return False


def _is_rng_file(rel: str) -> bool:
    return os.path.basename(rel).startswith("rng_state") and rel.endswith(".pth")


def _safetensors_problem(path: str) -> str | None:
    """The header parses as JSON and every tensor's byte range lies inside the file."""
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > size - 8:
                return f"`{path}` is truncated: its header needs {length} bytes, the file has {size - 8} left"
            header = json.loads(handle.read(length))
        ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    except (struct.error, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        return f"`{path}` is corrupt: its safetensors header does not parse ({type(exc).__name__})"
    if 8 + length + max(ends, default=0) > size:
        return f"`{path}` is truncated: its tensors need {8 + length + max(ends)} bytes, the file has {size}"
    return None


def _json_problem(path: str, step: int | None) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        return f"`{path}` is not valid JSON ({type(exc).__name__}: {exc})"
    if os.path.basename(path) == "trainer_state.json":
        if not isinstance(data, dict):
            return f"`{path}` does not hold a JSON object"
        saved = data.get("global_step", step)
        if step is not None and saved != step:
            return f"`{path}` says global_step={saved!r}, but the folder is for step {step}"
    return None


def _structural_problem(folder: str, verified: frozenset[str] = frozenset()) -> str | None:
    for rel in _files(folder):
        if rel in verified:
            continue  # byte for byte what was saved
        problem = _file_problem(folder, rel)
        if problem is not None:
            return problem
    return None


def _file_problem(folder: str, rel: str) -> str | None:
    """What the structural check of one file finds (``None`` for a file type it does not check)."""
    path = os.path.join(folder, rel)
    if rel.endswith(".safetensors"):
        return _safetensors_problem(path)
    if rel.endswith(".json"):
        match = _STEP_RE.search(os.path.basename(os.path.normpath(folder)))
        return _json_problem(path, int(match.group(1)) if match else None)
    if rel.endswith(_TORCH_SUFFIXES) and os.path.basename(rel) not in _NOT_LOADED:
        try:
            safe_torch_load(path, allow_numpy=_is_rng_file(rel))
        except CheckpointError as exc:
            return str(exc).rstrip(".")
    return None


def content_problem(folder: str | os.PathLike[str]) -> str | None:
    """Why the files of ``folder`` cannot be trusted, or ``None``: checksums first, then structure.

    Files listed in the manifest but absent are not reported here when a resume can do without them
    (optimizer, scheduler, scaler, RNG state); see :func:`missing_listed_files`.
    """
    folder = os.fspath(folder)
    try:
        listed = read_manifest(folder)
    except CheckpointError as exc:
        return str(exc).rstrip(".")
    if listed is None:
        return _structural_problem(folder)
    return _checksum_problem(folder, listed) or _structural_problem(folder, frozenset(listed))
