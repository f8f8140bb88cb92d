"""The queue: rollouts, attempts, runs and leases, their transactions and rules, and its HTTP API."""
