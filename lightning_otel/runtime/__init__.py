"""Runtime: the trainer's orchestration. `Trainer.fit`/`Trainer.dev` (with the dev report), the runners it starts
(local processes, `RunnerPool`; Ray actors, `RayRunners`), `TrainingRun` (the queue, the spans, the adapter and the
resources of one training), the `Algorithm` interface (and `Baseline`), and what a batch is read with.

May import the agent author's API (`agent_api`), the runner (`runner`: what it starts), capture, adapters, the
collector (its client; the embedded server `Trainer` starts when no collector URL is given) and serving (the policy
gateway of `Trainer.dev(gateway=True)`). Nothing in a runner process imports this room.
"""
