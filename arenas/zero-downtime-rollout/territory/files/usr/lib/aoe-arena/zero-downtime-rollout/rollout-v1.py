import sqlite3
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DB = "/var/lib/rollout/records.sqlite3"

def database():
    connection = sqlite3.connect(DB, timeout=10)
    connection.execute("CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, value TEXT NOT NULL)")
    return connection

class Handler(BaseHTTPRequestHandler):
    def send(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.send(200, b"ready")
            return
        if self.path == "/version":
            self.send(200, b"v1")
            return
        if self.path.startswith("/records/"):
            connection = database()
            row = connection.execute("SELECT value FROM records WHERE id=?", (self.path[9:],)).fetchone()
            connection.close()
            if row is None:
                self.send(404)
            else:
                self.send(200, row[0].encode())
            return
        self.send(404)

    def do_PUT(self):
        if not self.path.startswith("/records/"):
            self.send(404)
            return
        value = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
        connection = database()
        connection.execute(
            "INSERT INTO records(id,value) VALUES(?,?) ON CONFLICT(id) DO UPDATE SET value=excluded.value",
            (self.path[9:], value),
        )
        connection.commit()
        connection.close()
        self.send(204)

    def log_message(self, *_):
        pass

ThreadingHTTPServer(("127.0.0.1", 8081), Handler).serve_forever()
