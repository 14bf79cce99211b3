import http.client
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UPSTREAM = "/var/lib/rollout/upstream"

class Handler(BaseHTTPRequestHandler):
    def forward(self):
        try:
            with open(UPSTREAM) as source:
                port = int(source.read().strip())
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request(self.command, self.path, body=body)
            response = connection.getresponse()
            response_body = response.read()
            self.send_response(response.status)
            self.send_header("Content-Length", str(len(response_body)))
            self.end_headers()
            self.wfile.write(response_body)
            connection.close()
        except Exception:
            self.send_response(502)
            self.send_header("Content-Length", "0")
            self.end_headers()

    do_GET = forward
    do_PUT = forward

    def log_message(self, *_):
        pass

ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
