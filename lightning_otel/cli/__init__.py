"""Commands: `lightning-otel` (main: demo, train, runner, test server), `lightning-otel-run` (run), the two demos.
May import anything."""
