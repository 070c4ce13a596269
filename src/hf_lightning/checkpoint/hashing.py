"""Checksums of checkpoint files: taken while the bytes are written, or in one fast read of a file.

The checksum manifest (:mod:`hf_lightning.checkpoint.verify`) records, for every file of a checkpoint, its
size and a digest. Checkpoints written here use **XXH3-128** (the ``xxhash`` package); manifests written
before (format 1) hold SHA-256 digests and are still verified with SHA-256.

Why XXH3-128 and what it guarantees. The manifest guards against *accidental* damage: a truncated or
partly written file, flipped bits, a block of zeros or stale data from the storage. XXH3-128 is a
non-cryptographic 128-bit hash that passes the SMHasher quality suite, so a damaged file goes unnoticed
only if its 128-bit digest happens to equal the recorded one: a chance of 2^-128 per damaged file,
negligible next to any storage's own error rate (a truncation is caught by the size before any digest).
SHA-256 gives no more here: against *deliberate* tampering neither helps, since the manifest sits beside
the files it describes and whoever rewrites a file can rewrite the manifest too. XXH3-128 runs at
several GB/s on one core (5.4x hashlib's SHA-256 with the CPU's SHA instructions, measured on the
benchmark machine; docs/performance.md), which is what lets a checkpoint be hashed while it is written
and checked while it is read without a noticeable cost. Without ``xxhash`` installed, new manifests fall
back to SHA-256 (:data:`ALGORITHM`); a manifest naming an algorithm this process cannot compute raises
a :class:`~hf_lightning.checkpoint.io.CheckpointError` that says what to install.

:class:`HashingWriter` wraps the file object ``torch.save`` writes to, so the digest of ``optimizer.pt``
is taken from the very bytes being written. Files written by other code (a model's ``save_pretrained``)
are hashed by :func:`file_entry` in one read, right after they were written, from the page cache.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO

from hf_lightning.checkpoint.io import CheckpointError

__all__ = [
    "ALGORITHM",
    "ALGORITHMS",
    "HashingWriter",
    "file_entry",
    "hasher",
]

_CHUNK = 4 * 1024 * 1024
_PARALLEL_HASH_BYTES = 1024 * 1024  # smaller writes (zip headers, pickles) are hashed inline
_HASHER: ThreadPoolExecutor | None = None
_HASHER_LOCK = threading.Lock()


def _hash_thread() -> ThreadPoolExecutor:
    """The one thread that hashes large blocks beside their writing (started at first use)."""
    global _HASHER
    with _HASHER_LOCK:
        if _HASHER is None:
            _HASHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-lightning-hash")
        return _HASHER


def _xxh3_128() -> Any:
    import xxhash

    return xxhash.xxh3_128()


def _xxhash_available() -> bool:
    try:
        import xxhash  # noqa: F401
    except ImportError:
        return False
    return True


ALGORITHMS: dict[str, Callable[[], Any]] = {"xxh3_128": _xxh3_128, "sha256": hashlib.sha256}
"""The digests a manifest may name, each with the constructor of its incremental hasher."""

ALGORITHM = "xxh3_128" if _xxhash_available() else "sha256"
"""The digest new manifests record."""


def hasher(algorithm: str) -> Any:
    """A fresh incremental hasher (``update(bytes)``, ``hexdigest()``) for ``algorithm``."""
    make = ALGORITHMS.get(algorithm)
    if make is None:
        raise CheckpointError(
            f"Unknown checksum algorithm {algorithm!r} in a checkpoint manifest; known: {sorted(ALGORITHMS)}."
        )
    try:
        return make()
    except ImportError as exc:
        raise CheckpointError(
            f"The checkpoint's manifest records {algorithm} checksums, which need the `xxhash` package: "
            'pip install "xxhash>=3"'
        ) from exc


def file_entry(path: str, algorithm: str = ALGORITHM) -> dict[str, Any]:
    """``{"size": bytes, algorithm: hex digest}`` of the file at ``path``, read once in large chunks."""
    digest = hasher(algorithm)
    size = 0
    with open(path, "rb", buffering=0) as handle:
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        while count := handle.readinto(buffer):
            digest.update(view[:count])
            size += count
    return {"size": size, algorithm: digest.hexdigest()}


class HashingWriter:
    """A binary file object that hashes every byte on its way to ``handle`` (for ``torch.save`` and the like).

    ``on_progress(bytes_written)`` is called after each write (the sealer starts the disk's writeback
    early with it). :meth:`entry` gives the manifest entry once writing is done.
    """

    def __init__(
        self,
        handle: BinaryIO,
        algorithm: str = ALGORITHM,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        self.handle = handle
        self.algorithm = algorithm
        self.size = 0
        self._digest = hasher(algorithm)
        self._on_progress = on_progress

    def write(self, data: Any) -> int:
        """Hash ``data`` and write it all to the wrapped file; a large block is hashed on another thread while
        this one writes it (both release the GIL), and both end before this returns (``data`` may be a
        buffer its caller frees next: torch's copy of a GPU tensor)."""
        view = memoryview(data).cast("B")
        if len(view) >= _PARALLEL_HASH_BYTES:
            hashed = _hash_thread().submit(self._digest.update, view)
            try:
                self.handle.write(view)
            finally:
                hashed.result()
        else:
            self._digest.update(view)
            self.handle.write(view)
        self.size += len(view)
        if self._on_progress is not None:
            self._on_progress(self.size)
        return len(view)

    def flush(self) -> None:
        """Flush the wrapped file's buffer (not to disk: sealing does that)."""
        self.handle.flush()

    def fileno(self) -> int:
        """The wrapped file's descriptor."""
        return self.handle.fileno()

    def entry(self) -> dict[str, Any]:
        """``{"size", algorithm}`` of what was written so far."""
        return {"size": self.size, self.algorithm: self._digest.hexdigest()}
