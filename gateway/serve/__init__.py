"""Serving: the request handler, the aiohttp application, the admin API, workers, supervisor."""
