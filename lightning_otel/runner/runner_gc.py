"""The garbage collector of a runner process, set for a long-lived process that runs many short rollouts.

A runner's heap after start-up is large and lives as long as the process: the agent's modules, their classes and
schemas (~130,000 tracked objects with openai loaded). CPython's full collections walk all of it, ~100 ms each on a
2-core VM, five per 1,500 rollouts of four calls. Each call's response and span also live until
the span finisher thread has read them, so young collections come ~3x as often as in the agent run alone.

`settle_heap()`, once the agent and the instrumentation are loaded: the heap as it is then is frozen (`gc.freeze`,
never walked again) and young collections run every 5,000 allocations instead of 700. Cycles are still collected;
only objects that were alive at start-up stay for the process's life. Timed with `gc.callbacks` in one runner over
1,500 rollouts of four calls (two runs each way): GC took 0.58 ms a rollout with CPython's defaults, 0.19 settled.

Only a runner's main calls it (`run_runner_process`: the Trainer's runner processes, `lightning-otel runner`, a
script's runner command), in a process that then runs nothing but the runner; the process that calls
`Trainer.fit`, and any process that merely imports us, is never changed. `AGL_RUNNER_GC=default` leaves CPython's
settings alone.
"""

from __future__ import annotations

import gc
import os

GC_ENV = "AGL_RUNNER_GC"
THRESHOLDS = (5_000, 20, 20)  # young collections every 5,000 allocations; each older generation 20x rarer


def settle_heap() -> bool:
    """Freeze what is alive now and raise the collection thresholds (see the module docstring); False when
    `AGL_RUNNER_GC=default` says to leave the collector as it is."""
    setting = os.environ.get(GC_ENV, "").strip().lower()
    if setting == "default":
        return False
    if setting not in ("", "settled"):
        raise ValueError(f"{GC_ENV}={setting!r}: use 'default' (CPython's settings) or leave it unset")
    # Fresh start-up garbage goes now, not frozen in. Only the young generations: a full collection of the start-up
    # heap took 72-93 ms before the runner's first claim and freed ~30 objects (the old generation holds modules).
    gc.collect(1)
    gc.freeze()
    gc.set_threshold(*(max(ours, current) for ours, current in zip(THRESHOLDS, gc.get_threshold(), strict=True)))
    return True
