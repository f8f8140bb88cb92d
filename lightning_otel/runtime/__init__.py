"""Runtime: the trainer side's loop. `LitAgent` and `@rollout`, resources (`LLM`, `ProxyLLM`), runner processes,
the `Algorithm` interface (and `Baseline`), `Trainer.fit`/`Trainer.dev` and the dev report.

May import capture (runners trace the agents they run), adapters and the collector's client (and its embedded
server, which `Trainer` starts when no collector URL is given).
"""
