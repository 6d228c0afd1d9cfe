"""Shipped rule packs, addressed in configs as `builtin:NAME` (installed as gateway.mappings)."""
