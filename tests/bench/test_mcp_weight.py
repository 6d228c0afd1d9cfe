"""The weight figures in docs/mcp.md: the compact form costs less than the full one, measured
with the npm filesystem server directly and through `mendpoint stdio` (bench/mcp_weight.py)."""

from __future__ import annotations

from bench import mcp_weight


def test_compact_form_weighs_less_than_the_full_one() -> None:
    full, compact = mcp_weight.measure()
    assert full.form.startswith("full") and compact.form == "compact"
    # The `_meta` copy is gone: at least the failure object's size less off the wire.
    assert compact.failure_wire_bytes < full.failure_wire_bytes - full.failure_model_chars // 2
    # What the model reads of the failure is the same item in both forms.
    assert compact.failure_model_chars == full.failure_model_chars > 0
    assert full.tools == compact.tools > 0
    assert 0 < compact.tools_list_chars < full.tools_list_chars // 2
    assert "tokens" in full.row()
