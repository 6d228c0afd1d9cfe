"""Retrofitting an API you do not own: a starter config from OpenAPI, rule drafts from traffic."""
