"""Run a script as it runs in a fresh venv holding only ``hf-lightning[extra]`` and what that pulls in.

Building one real venv per example would take minutes each, so the venv is simulated: every installed
distribution outside the dependency closure of ``hf-lightning[extra]`` (read from the installed metadata,
markers and extras evaluated) is hidden from the child process. A ``sitecustomize.py`` put first on
``PYTHONPATH`` replaces the import system's ``PathFinder`` with one that finds neither the modules the
hidden distributions installed (``import optuna`` raises ``ModuleNotFoundError``,
``importlib.util.find_spec`` returns ``None``) nor their metadata (``importlib.metadata.version`` raises
``PackageNotFoundError``). It hides by installed path, not by name, so a package's vendored copy of a
hidden one (Ray's ``thirdparty_files/psutil``) is still found, as in a real venv. Child processes
(torchrun ranks, Ray workers, DataLoader workers) inherit it through the environment.
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.requirements import Requirement

__all__ = ["closure", "example_argv", "hidden", "readme_examples", "run_in_venv"]

ROOT = Path(__file__).resolve().parents[1]
# In every fresh venv of Python 3.11 (`python -m venv`), whatever it installs.
_VENV_BASE = ("pip", "setuptools")
# Found in the checkout itself (the working folder, or the script's folder), never hidden.
_PROJECT = frozenset(p.stem for folder in (ROOT, ROOT / "examples") for p in folder.iterdir())

_SITECUSTOMIZE = '''\
"""Hide the distributions a fresh venv of hf-lightning[{extras}] would not hold (tests/_venv.py)."""
import os
import sys
from importlib.machinery import PathFinder

# Where the hidden distributions put their top-level modules and their metadata folders.
_HIDDEN = frozenset({paths!r})


def _hidden(path):
    return path is not None and (path in _HIDDEN or os.path.dirname(path) in _HIDDEN)


class _NotInstalledPathFinder(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        entries = list(sys.path if path is None else path)
        while True:
            spec = super().find_spec(fullname, entries, target)
            if spec is None or "." in fullname:
                return spec
            locations = list(spec.submodule_search_locations or ()) or [spec.origin]
            if not all(_hidden(location) for location in locations):
                return spec
            # not there in a real venv: the import system would go on to the later entries of the path
            # (a package's vendored copy of a hidden one, put after site-packages)
            where = os.path.dirname(os.path.normpath(locations[0]))
            later = [i for i, e in enumerate(entries) if os.path.normpath(os.path.abspath(e or ".")) == where]
            if not later:
                return None
            entries = entries[later[0] + 1 :]

    @classmethod
    def find_distributions(cls, *args, **kwargs):
        found = super().find_distributions(*args, **kwargs)
        return (d for d in found if not _hidden(os.fspath(getattr(d, "_path", "")) or None))


sys.meta_path[:] = [_NotInstalledPathFinder if f is PathFinder else f for f in sys.meta_path]
'''


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.cache
def _installed() -> dict[str, metadata.Distribution]:
    return {_normalize(d.metadata["Name"]): d for d in _site_distributions() if d.metadata["Name"]}


def _site_distributions() -> list[metadata.Distribution]:
    """The distributions installed in the environment's site folders. A package's vendored copies are not
    among them: Ray puts ``ray/thirdparty_files`` (its own psutil, with its metadata) on ``sys.path`` when
    it is imported, and a copy found there would be hidden from the child with the real one, which a
    real venv never does (this process imported Ray or not, depending on the tests run before)."""
    return list(metadata.distributions(path=[path for path in sys.path if not _inside_site_folder(path)]))


def _inside_site_folder(path: str) -> bool:
    """Whether ``path`` lies inside a ``site-packages`` / ``dist-packages`` folder of ``sys.path``."""
    where = os.path.abspath(path or ".")
    sites = {
        os.path.abspath(p) for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")
    }
    return any(where != site and where.startswith(site + os.sep) for site in sites)


def _project_requirements(extras: frozenset[str]) -> list[str]:
    """hf-lightning's own requirement lines for ``extras``, read from pyproject.toml (so an installed copy
    whose metadata predates an edit of the extras does not matter); the installed metadata on Python 3.10."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: the installed metadata (its markers name the extras)
        return list(_installed()["hf-lightning"].requires or ())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    return list(project["dependencies"]) + [line for extra in extras for line in optional[extra]]


@functools.cache
def closure(extras: tuple[str, ...]) -> frozenset[str]:
    """The normalized names of ``hf-lightning[extras]`` and every distribution it installs."""
    installed = _installed()
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [("hf-lightning", frozenset(extras))]
    while todo:
        item = todo.pop()
        name, wanted = item
        if item in seen or (name not in installed and name != "hf-lightning"):
            continue
        seen.add(item)
        if name == "hf-lightning":
            lines = _project_requirements(wanted)
        else:
            lines = list(installed[name].requires or ())
        environments = [{"extra": extra} for extra in (*wanted, "")]
        for line in lines:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate(env) for env in environments):
                todo.append((_normalize(req.name), frozenset(req.extras)))
    return frozenset(name for name, _ in seen)


def _top_level_paths(dist: metadata.Distribution) -> set[str]:
    """The absolute paths of what ``dist`` installed at the top of its folder: modules, packages, metadata."""
    tops = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
    return {os.path.normpath(str(dist.locate_file(top))) for top in tops if Path(top).stem not in _PROJECT}


@functools.cache
def hidden(extras: tuple[str, ...]) -> frozenset[str]:
    """The installed top-level paths (modules, packages, ``.dist-info``) of every distribution the venv
    of ``hf-lightning[extras]`` lacks, less any path a distribution it holds shares."""
    keep = closure(extras) | set(_VENV_BASE)
    hide: set[str] = set()
    shared: set[str] = set()
    for dist in _site_distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        (shared if _normalize(name) in keep else hide).update(_top_level_paths(dist))
    stdlib = {p for p in hide if Path(p).name.split(".")[0] in sys.stdlib_module_names}
    return frozenset(hide - shared - stdlib)


@functools.cache
def _site_dir(extras: tuple[str, ...]) -> str:
    folder = tempfile.mkdtemp(prefix="venv-" + "-".join(extras or ("base",)) + "-")
    text = _SITECUSTOMIZE.format(extras=",".join(extras), paths=sorted(hidden(extras)))
    Path(folder, "sitecustomize.py").write_text(text)
    return folder


def run_in_venv(
    extras: tuple[str, ...], argv: list[str], cwd: str | os.PathLike, timeout: float = 600, **env: str
) -> subprocess.CompletedProcess:
    """``python *argv`` (argv[0] a path under the project) as in a venv of ``hf-lightning[extras]`` only.

    Python's default warning filters apply (``PYTHONWARNINGS`` is dropped), as for a user's run.
    """
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PYTHONPATH")}
    environ.update(env)
    environ["PYTHONPATH"] = _site_dir(tuple(sorted(extras)))
    return subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout
    )


# A row of the README's "Three ways in" table that runs an example: | ... | `command` | `pip install -e ".[extra]"` |
_EXAMPLE_ROW = re.compile(
    r"\| `((?:python|torchrun)[^`]*?examples/(\w+)\.py[^`]*)` \| `pip install -e \"\.\[(\w+)\]\"` \|"
)


def readme_examples() -> dict[str, tuple[str, str]]:
    """{example name: (its command, the extra it installs)} as the README's "Three ways in" table gives them."""
    text = (ROOT / "README.md").read_text()
    return {name: (command, extra) for command, name, extra in _EXAMPLE_ROW.findall(text)}


def example_argv(command: str, *extra_args: str) -> list[str]:
    """The README's ``command`` as arguments of ``python`` (its script path made absolute), then ``extra_args``."""
    words = command.split()
    if words[0] == "torchrun":
        words = ["-m", "torch.distributed.run", *words[1:]]
    else:
        words = words[1:]
    words = [str(ROOT / w) if w.startswith("examples/") else w for w in words]
    return [*words, *extra_args]
