"""Recovery resolution (docs/recovery.md): which already-available skills can repair a failure."""
