"""Replica of the records database, listening on 127.0.0.1:8082.

Its role comes from /var/lib/failover/replica.role, read again for every request;
writes are refused unless that role is "primary". The database file is reopened
for every request as well.
"""
import sqlite3
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = "/var/lib/failover"
DB = STATE + "/records.sqlite3"
ROLE = STATE + "/replica.role"
PREFIX = "/records/"


def role():
    try:
        with open(ROLE, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def database():
    db = sqlite3.connect(DB, timeout=5)
    db.execute("CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, value TEXT NOT NULL)")
    return db


class Handler(BaseHTTPRequestHandler):
    def reply(self, status, body=b""):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.reply(200, b"ready")
        elif self.path == "/role":
            self.reply(200, role().encode())
        elif self.path.startswith(PREFIX) and len(self.path) > len(PREFIX):
            db = database()
            try:
                row = db.execute("SELECT value FROM records WHERE id = ?", (self.path[len(PREFIX):],)).fetchone()
            finally:
                db.close()
            if row is None:
                self.reply(404)
            else:
                self.reply(200, row[0].encode())
        else:
            self.reply(404)

    def do_PUT(self):
        if not (self.path.startswith(PREFIX) and len(self.path) > len(PREFIX)):
            self.reply(404)
            return
        length = int(self.headers.get("Content-Length") or 0)
        value = self.rfile.read(length).decode("utf-8", errors="replace")
        if role() != "primary":
            self.reply(503, b"read-only")
            return
        db = database()
        try:
            db.execute(
                "INSERT INTO records (id, value) VALUES (?, ?) "
                "ON CONFLICT(id) DO UPDATE SET value = excluded.value",
                (self.path[len(PREFIX):], value),
            )
            db.commit()
        finally:
            db.close()
        self.reply(204)

    def log_message(self, format, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", 8082), Handler).serve_forever()
