"""Telemetry any layer may report to: Prometheus metrics, their multi-process view, logs."""
