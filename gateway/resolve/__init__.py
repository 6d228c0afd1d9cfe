"""Recovery resolution (SPEC §6): which already-available skills can repair a failure."""
