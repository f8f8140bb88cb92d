"""Bootstrap used by `lightning-otel-run`: a `sitecustomize` that instruments the child program."""
