"""Receiving: OTLP over HTTP and gRPC, decoding, ingest into a store, forwarding."""
