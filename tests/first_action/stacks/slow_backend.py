"""A backend that answers every request after a pause, for the reverse proxies' timeouts.

    python slow_backend.py PORT SECONDS

Standard library only; it writes no error of its own: the proxy in front gives up first and
answers with its own timeout page.
"""

import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Slow(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        time.sleep(float(sys.argv[2]))
        body = b'{"done": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Slow).serve_forever()
