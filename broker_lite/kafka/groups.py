"""Group APIs (filled in by the groups step)."""
