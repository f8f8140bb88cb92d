"""A policy gateway served for a training run: its spans go to the run's collector and are flushed before the run
reads a batch, its count of served calls is the run's; and the address runners are given for it."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from lightning_otel.serving.collector_tracer import collector_tracer
from lightning_otel.serving.gateway import GatewayServer, PolicyGateway, PolicyRouting

if TYPE_CHECKING:
    from lightning_otel.collector.client import Client


class GatewayRun(Protocol):
    """What a served gateway needs of the training it serves (`TrainingRun` is one): the collector its spans go to,
    and where to register the flush of its spans and its count of served calls."""

    client: Client

    def add_span_source(self, flush: Callable[[], bool]) -> None: ...

    def add_call_counter(self, served: Callable[[list[tuple[str, str]]], int]) -> None: ...


@contextlib.contextmanager
def gateway_for_run(
    run: GatewayRun,
    replicas: Sequence[str],
    *,
    sampling: Mapping[str, Any],
    validation_sampling: Mapping[str, Any],
    model: str | None,
    host: str = "127.0.0.1",
    port: int = 0,
    paused: bool = False,
    policies: PolicyRouting | None = None,
) -> Iterator[tuple[PolicyGateway, GatewayServer]]:
    """A served gateway for a training run (a `TrainingRun`): its spans go to the run's collector and are flushed
    before the run reads a batch, so no rollout is read without the calls the gateway served."""
    with collector_tracer(run.client) as spans:
        run.add_span_source(spans.flush)
        gateway = PolicyGateway(replicas, sampling=sampling, validation_sampling=validation_sampling,
                                tracer=spans.tracer, model=model, policies=policies)  # fmt: skip
        run.add_call_counter(gateway.calls_served)
        if paused:
            gateway.pause()
        with GatewayServer(gateway, host=host, port=port) as server:
            yield gateway, server


def advertised_url(host: str, port: int) -> str:
    """The gateway's base URL as runners should use it: a wildcard bind address becomes this machine's name."""
    if host in ("0.0.0.0", "::", ""):
        host = socket.getfqdn()
    return f"http://[{host}]:{port}/v1" if ":" in host else f"http://{host}:{port}/v1"


__all__ = ["GatewayRun", "advertised_url", "gateway_for_run"]
