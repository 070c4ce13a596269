"""Developer sessions: tests, lint (ruff + the architectural rule), typecheck, demo, bench, docs."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "venv"
PYTHON = "3.11"


def _install(session: nox.Session, extras: str = "test") -> None:
    session.install("torch==2.13.0")
    session.install("-e", f".[{extras}]")
    if extras == "test":  # a source archive, built against that torch (the slow DeepSpeed tests)
        session.install("--no-build-isolation", "deepspeed>=0.16", env={"DS_BUILD_OPS": "0"})


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The test suite (fast tests; pass -m slow for the slow ones)."""
    _install(session)
    session.run("python", "-m", "pytest", "-q", "-m", "not slow", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff (check and format --check), plus the layer rules of docs/architecture.md."""
    session.install("ruff>=0.5")
    paths = ("src", "adapters", "tests", "examples", "benchmarks", "tools", "noxfile.py")
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)
    session.run("python", "tools/check_layers.py")


@nox.session(python=PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy over the vocabulary and the adapters."""
    _install(session)
    session.install("mypy>=1.10")
    session.run("mypy", "--ignore-missing-imports", "--follow-imports=silent", "src/hf_lightning", "adapters")


@nox.session(python=PYTHON)
def demo(session: nox.Session) -> None:
    """The README's main job: the offline quickstart, then the Lightning-user example."""
    _install(session, "transformers")
    session.run("python", "examples/quickstart.py")
    session.run("python", "examples/lightning_user.py")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks: step overhead vs a raw loop and transformers, evaluation memory, sampler padding,
    checkpoint save / background stall / resume and start-up vs transformers."""
    _install(session)
    session.run("python", "benchmarks/bench_step.py", *session.posargs)
    session.run("python", "benchmarks/bench_samplers.py")
    session.run("python", "benchmarks/bench_eval_memory.py")
    session.run("python", "benchmarks/bench_ddp_tokens.py")
    session.run("python", "benchmarks/bench_checkpoint.py", "--size", "400MB")
    session.run("python", "benchmarks/bench_save_floor.py")
    session.run("python", "benchmarks/bench_page_cache.py")
    session.run("python", "benchmarks/bench_startup.py")


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Regenerate docs/arguments.md from the argument table."""
    _install(session)
    session.run("python", "tools/gen_arguments_doc.py")
