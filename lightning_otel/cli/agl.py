"""`agl`: Agent Lightning's command, as its tutorials spell it.

    agl store --port 9999          # agl-otel-collector with its query API (what --external-store-address names)
                                   # on 9999; any other agl-otel-collector option passes through (--store URL, ...)

Agent Lightning's other verbs (`vllm`, `agentops`) have no counterpart to start here: each answers in one line what
to use instead, and exits 2. Nothing is ignored.
"""

from __future__ import annotations

import sys

INSTEAD = {
    "vllm": "serve the policy with vLLM as usual: lightning-otel's policy gateway records its token ids, nothing to "
    "wrap (see docs/training/verl.md)",
    "agentops": "tracing is OpenTelemetry here: `import lightning_otel.auto` or `lightning-otel-run -- python ...`",
}
USAGE = "usage: agl store [--port PORT] [agl-otel-collector options]"


def store_arguments(argv: list[str]) -> list[str]:
    """`agl store` arguments as agl-otel-collector's: `--port` is the query API's (the store address)."""
    translated = []
    for argument in argv:
        if argument == "--port":
            translated.append("--query-port")
        elif argument.startswith("--port="):
            translated.append("--query-port=" + argument.split("=", 1)[1])
        else:
            translated.append(argument)
    return translated


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    verb, rest = (argv[0], argv[1:]) if argv else ("", [])
    if verb == "store":
        from lightning_otel.collector.cli import main as collector_main

        print("agl store: agl-otel-collector (the query API on --port is the store address; OTLP on 4318)", flush=True)
        collector_main(store_arguments(rest))
        return
    if verb in INSTEAD:
        print(f"agl {verb}: not needed with lightning-otel; {INSTEAD[verb]}", file=sys.stderr)
    else:
        print(f"{USAGE}  (got {' '.join(argv) or 'no verb'})", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
