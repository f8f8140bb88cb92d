"""Stores: the span store's interface, SQLite and PostgreSQL, their shared SQL, the factory by URL."""
