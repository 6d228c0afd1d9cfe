"""The upstream side of the HTTP data path: connection pool, exchange, deadline, the call.

Past this package a transport fault is a value (`transport_kind`), never an exception.
"""
