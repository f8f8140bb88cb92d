"""A model folder served on loopback as vLLM would serve it (a CPU replica: token ids, the hermes tool parser), for
the probes that run an example's agent against an untrained policy."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def served(folder: Path, seed: int) -> Iterator[str]:
    """The replica's base URL while the block runs."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lightning_otel.serving.cpu_replica import CPUReplica, HFChatTokenizer, ReplicaServer

    torch.manual_seed(seed)
    tokenizer = HFChatTokenizer(AutoTokenizer.from_pretrained(folder))
    replica = CPUReplica(AutoModelForCausalLM.from_pretrained(folder), tokenizer, seed=seed)
    with ReplicaServer(replica) as server:
        yield server.base_url
