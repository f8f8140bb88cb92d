"""Traces to datasets: `export_dataset` (and `lightning-otel export`) writes a store's rollouts as SFT rows,
preference pairs or whole rollouts, in JSONL, Parquet or a Hugging Face datasets folder."""
