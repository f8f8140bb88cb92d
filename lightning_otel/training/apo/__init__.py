"""APO: Agent Lightning's prompt optimisation (critiques and edits from traces) with GEPA's search."""
