"""The one enrichment step every transport shares: classify, resolve, render, under a budget.

A failure observed by any transport (an HTTP route, an MCP route, the bridge, stdio) comes in as
an `Observation` and leaves as a rendered failure or as "fall back to the original bytes".
"""
