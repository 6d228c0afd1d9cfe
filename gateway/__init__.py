"""Mendpoint: a transparent reverse proxy that turns API failures into recovery envelopes."""

__version__ = "0.2.0"
