"""The span as every store keeps it: the columns it is indexed by, and its exact OTLP bytes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class SpanRecord:
    """One span as the store keeps it: indexed columns plus the exact OTLP bytes of span, resource and scope."""

    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    name: str
    kind: int
    start_ns: int
    end_ns: int
    status_code: int
    service_name: str
    rollout_id: str | None
    attempt_id: str | None
    agent_name: str | None
    operation: str | None
    span_bytes: bytes
    resource_bytes: bytes
    scope_bytes: bytes
    scope_digest: bytes  # identifies (resource, scope): stores keep each pair once


__all__ = ["SpanRecord"]
