"""The HTTP data path: routing, header hygiene, forwarding, streaming, transport faults."""
