"""The runner: what loads in a runner process. It claims rollouts from the collector's queue, runs the agent on each
inside its rollout context, flushes the spans and reports the attempt (`Runner`); `run_runner_process` is a runner
process's main (the Trainer's runner processes, `lightning-otel runner`, Ray runner actors), `RunnerOptions` its
settings in one value.

May import the agent author's API, capture and the collector's client; never the trainer's orchestration (`runtime`),
training or serving (tests/test_layout.py checks both the imports and what a runner process loads).
"""
