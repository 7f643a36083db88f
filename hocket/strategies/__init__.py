"""The strategy registry (filled in by the registry change)."""
