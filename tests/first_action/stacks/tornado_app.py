"""Tornado, its own server: every error page here is Tornado's own.

Error pages: tornado/web.py, RequestHandler.write_error (`<html><title>CODE: REASON</title>
<body>CODE: REASON</body></html>`; a HTTPError's log_message is logged, not sent); missing
arguments: MissingArgumentError (400); XSRF: check_xsrf_cookie (403, "'_xsrf' argument
missing from POST" in the log only); 405 from RequestHandler._execute for a method the handler
does not define.
"""

import asyncio
import sys

import tornado.web


class Items(tornado.web.RequestHandler):
    def get(self) -> None:
        limit = int(self.get_argument("limit"))
        self.write({"items": [{"id": 1, "name": "apple"}][:limit]})

    def post(self) -> None:
        self.write({"id": 2})


class Item(tornado.web.RequestHandler):
    def check_xsrf_cookie(self) -> None:
        """Items are edited by API clients without a browser session: no XSRF token here."""

    def get(self, item_id: str) -> None:
        if item_id != "1":
            raise tornado.web.HTTPError(404, reason=f"Item {item_id} not found")
        self.write({"id": 1, "name": "apple"})

    def put(self, item_id: str) -> None:
        raise tornado.web.HTTPError(409, reason="Item is being edited by someone else")


class Crash(tornado.web.RequestHandler):
    def get(self) -> None:
        raise RuntimeError("boom")


async def main(port: int) -> None:
    app = tornado.web.Application(
        [(r"/items", Items), (r"/items/(\d+)", Item), (r"/crash", Crash)],
        xsrf_cookies=True,
    )
    app.listen(port, address="127.0.0.1")
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
