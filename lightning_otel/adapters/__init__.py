"""Adapters: the spans of a rollout in, training samples out (`TraceToTriplet`, `TraceToMessages`).

They read the flat spans the collector hands the trainer (`lightning_otel.flat_span.Span`) and import only the
wire contract.
"""
