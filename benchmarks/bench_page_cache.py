"""How fast a checkpoint-sized file goes into the page cache, by where its pages come from.

One process writes ``--gib`` GiB (``torch.save`` of float tensors to a path, transformers' way of writing
``optimizer.pt``) four times per round, ``os.sync()`` before each:

- **fresh**: into pages the kernel has not used for a while (the first write of the process);
- **just freed**: right after the previous file was deleted, so its pages were freed a moment ago;
- **freed 30 s ago**: the same, 30 s after the delete;
- **just freed** again.

On a virtual machine whose free memory goes back to the host (virtio-balloon's free page reporting, as
on the development machine), pages free for a while must be backed by the host again when they are next
written: the same bytes then take several times longer to write. Both libraries' saves pay it alike;
it is why their 2 GB save times swing from run to run (docs/performance.md).

    python benchmarks/bench_page_cache.py [--gib 1.4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tmp", default=None, help="where the file is written (default: the system's)")
    cli = parser.parse_args()
    torch.set_num_threads(1)
    count = max(1, round(cli.gib * 1024 / 32))
    state = {f"t{i}": torch.randn(8 * 1024 * 1024) for i in range(count)}  # 32 MiB each
    folder = tempfile.mkdtemp(prefix="bench_page_cache_", dir=cli.tmp)
    seconds: dict[str, list[float]] = {}

    def timed(name: str, pause: float = 0.0) -> None:
        time.sleep(pause)
        os.sync()
        path = os.path.join(folder, "file.pt")
        started = time.perf_counter()
        torch.save(state, path)
        seconds.setdefault(name, []).append(time.perf_counter() - started)
        os.remove(path)

    try:
        for _ in range(cli.rounds):
            timed("fresh" if not seconds else "freed 30 s ago", pause=30.0 if seconds else 0.0)
            timed("just freed")
            timed("freed 30 s ago", pause=30.0)
            timed("just freed")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    size = count * 32 / 1024
    print(f"{size:.2f} GiB into the page cache, {cli.rounds} rounds (seconds: median, all)")
    for name, values in seconds.items():
        print(f"| {name} | {statistics.median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |")


if __name__ == "__main__":
    main()
