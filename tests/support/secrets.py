"""Secret files as an operator must write them: readable by their owner only (mode 0600);
the gateway refuses one every user can read (docs/security.md#secret-files)."""

from __future__ import annotations

from pathlib import Path


def write_secret(path: Path, text: str) -> Path:
    """`text` into `path`, mode 0600 before a byte of it is written."""
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text)
    return path
