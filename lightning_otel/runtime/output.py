"""Our lines on the terminal, every other library's output in a log file.

    with lightning_otel.quiet("agl-demo/demo.log", verbose=args.verbose):
        trainer.fit(...)                 # Ray, verl, torch, the runners: into demo.log; the progress bar: the terminal

Inside `quiet`, this process's standard output and error (the file descriptors, so child processes, Ray's workers
and C extensions too) go to the log; `terminal()` is the console our own lines use (the training loop's progress,
summaries). Our own warnings (the `lightning_otel` loggers: a batch no runner claims, spans lost) go to both: a run
that waits on something must say so where its user looks. `verbose=True` changes nothing: everything stays on the
terminal. Warnings we know to be harmless are dropped by their message in this process (`HARMLESS_WARNINGS`), not
by category.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Messages of warnings other libraries give in every run that say nothing about it (matched at the start).
HARMLESS_WARNINGS = (
    r".* engine is not available",  # verl: optional engines (megatron, torchtitan, ...) not installed
    r"is_fx_tracing will return true",  # torch.fx, from verl's FSDP engine
    r"Legacy trainer is deprecated",  # verl 0.9.1: the training loop uses its legacy trainer's pieces (docs: VERL)
    r"`torch_dtype` is deprecated",  # transformers 5
)

_terminal: Any = None


def terminal() -> Any:
    """The console our own lines go to: the terminal kept by `quiet`, else standard output (a rich Console)."""
    from rich.console import Console

    return _terminal if _terminal is not None else Console(highlight=False, soft_wrap=True)


@contextlib.contextmanager
def quiet(log_file: str | Path, *, verbose: bool = False) -> Iterator[Any]:
    """See the module docstring; yields the terminal console."""
    global _terminal
    from rich.console import Console

    with warnings.catch_warnings():
        for message in HARMLESS_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        if verbose:
            yield terminal()
            return
        path = Path(log_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        kept = os.fdopen(os.dup(1), "w", buffering=1)
        with path.open("ab", buffering=0) as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            _terminal = Console(file=kept, highlight=False, soft_wrap=True)
            ours = logging.getLogger("lightning_otel")
            handlers = [logging.StreamHandler(kept), logging.StreamHandler(sys.stderr)]  # the terminal, the log
            for handler in handlers:
                handler.setLevel(logging.WARNING)
                handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
                ours.addHandler(handler)
            try:
                yield _terminal
            finally:
                for handler in handlers:
                    ours.removeHandler(handler)
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                for descriptor in saved:
                    os.close(descriptor)
                _terminal = None
                kept.close()
