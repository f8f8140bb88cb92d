"""Reads and views: the query APIs (Jaeger v1/v3, rollout reads), the rollout view (/ui), health."""
