"""The fence around other projects' internals: every non-public aiohttp or CPython name used.

Each name used is reached through one module here, with a test that fails when an upgrade moves
it (tests/fence/test_aiohttp_private.py), so an upgrade breaks a test, not a request.
"""
