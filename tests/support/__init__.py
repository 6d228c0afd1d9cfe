"""Helpers shared by the test packages; no test module imports from another test module."""
