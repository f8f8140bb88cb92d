"""Rewards from reward models: `scorer` (a trained model in memory), `server` (the HTTP service), `micro_batch`,
`client` (async, batched, retried) and `scoring` (`score_answer`, `weighted_reward`: recorded as spans)."""
