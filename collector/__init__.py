"""agl-otel-collector: the durable OTLP collector (receivers, stores, query APIs, forwarding). Not built yet."""
