"""Public records endpoint on 0.0.0.0:8080.

For every request it reads the backend port from /var/lib/failover/upstream and
forwards the method, path and body to 127.0.0.1:<port> (2 s timeout), relaying
the status and body. When the backend cannot be reached it answers 502.
"""
import http.client
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UPSTREAM = "/var/lib/failover/upstream"


class Handler(BaseHTTPRequestHandler):
    def reply(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def forward(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        try:
            with open(UPSTREAM, encoding="utf-8") as fh:
                port = int(fh.read().strip())
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            try:
                conn.request(self.command, self.path, body=body)
                resp = conn.getresponse()
                status, data = resp.status, resp.read()
            finally:
                conn.close()
        except Exception:
            self.reply(502)
            return
        self.reply(status, data)

    do_GET = forward
    do_PUT = forward

    def log_message(self, format, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
