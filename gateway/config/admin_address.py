"""The admin listener's default address.

One value, which the config model defaults to and the command line's help names; in a module
of its own so the command line can name it without importing the config models (pydantic),
which `mendpoint stdio` must not wait for (docs/performance.md#mcp-start-up).
"""

from __future__ import annotations

# Not 9090 (Prometheus itself), nor 9091-9094, 9100-9999 (Prometheus's exporter allocations),
# 9464 (OpenTelemetry's Prometheus exporter) or 9901 (Envoy's admin): a gateway must start on
# the host that scrapes it. Why this one: docs/operations.md#admin-listener.
DEFAULT_ADMIN = "127.0.0.1:8491"
