"""A Flask app that fails the way Flask apps do, for the flask pack's live tests.

`python flask_app.py PORT` serves it with waitress on 127.0.0.1:PORT. The error pages are
Werkzeug's own HTML: `abort(400, "…")` with a description, `request.get_json()` on a body
that is not JSON, the router's 404 and 405, a rate limit with Retry-After, an oversized body
and an unhandled exception.
"""

from __future__ import annotations

import sys

from flask import Flask, abort, request
from werkzeug.exceptions import TooManyRequests

app = Flask(__name__)
app.config["MAX_CONTENT_LENGTH"] = 1024


@app.post("/orders")
def create_order() -> dict[str, object]:
    data = request.get_json()
    if "name" not in data:
        abort(400, "Missing 'name' in the request body")
    return {"ok": True}


@app.post("/upload")
def upload() -> dict[str, int]:
    return {"size": len(request.get_data())}


@app.get("/private")
def private() -> dict[str, bool]:
    abort(401)


@app.get("/admin")
def admin() -> dict[str, bool]:
    abort(403)


@app.get("/search")
def search() -> dict[str, bool]:
    raise TooManyRequests("Slow down: 5 searches per minute", retry_after=7)


@app.get("/crash")
def crash() -> dict[str, bool]:
    raise RuntimeError("secret database password in /srv/app/db.py")


if __name__ == "__main__":
    from waitress import serve

    serve(app, host="127.0.0.1", port=int(sys.argv[1]), _quiet=True)
