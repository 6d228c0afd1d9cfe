"""Tools that run without traffic: explain, fixture tests, schemas, and the retrofit helpers.

They reuse the data path's own code (the same classifier, the same rendering), so what they
print is what the gateway would answer.
"""
