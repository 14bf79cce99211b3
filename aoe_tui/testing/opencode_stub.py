"""A stand-in for the opencode binary in tests: replays a recorded run (issue 18).

``python -m aoe_tui.testing.opencode_stub SCRIPT.json`` runs the actions of SCRIPT (a JSON
list), in order:

- ``{"event": {...}}``: one ``--format json`` event line on stdout (docs/opencode.md §4);
- ``{"stderr": "text"}``: text on stderr (a newline is added);
- ``{"log": "line"}``: a line appended to opencode's own log (the file named by
  ``$OPENCODE_STUB_LOG``; its permission lines are docs/opencode.md §5's format);
- ``{"sleep": s}``: sleep ``s`` seconds;
- ``{"chat": "http://HOST:PORT/v1", "model": "m"}``: one streamed chat request with a tool
  (model traffic, e.g. through the credential proxy), its answer read to the end;
- ``{"exit": n}``: exit with status ``n``; ``{"hang": true}``: sleep until killed.

Without an ``exit`` action the stub exits 0 after the last action.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request


def _chat(base_url: str, model: str) -> None:
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": "go"}],
            "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]}
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer placeholder"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        while resp.read(1024):
            pass


def main(argv: list[str] | None = None) -> int:
    """Run the script named by ``argv[0]``; returns the exit status."""
    args = sys.argv[1:] if argv is None else argv
    with open(args[0], encoding="utf-8") as fh:
        actions = json.load(fh)
    for act in actions:
        if "event" in act:
            sys.stdout.write(json.dumps(act["event"]) + "\n")
            sys.stdout.flush()
        elif "stderr" in act:
            sys.stderr.write(act["stderr"] + "\n")
            sys.stderr.flush()
        elif "log" in act:
            with open(os.environ["OPENCODE_STUB_LOG"], "a", encoding="utf-8") as log:
                log.write(act["log"] + "\n")
        elif "sleep" in act:
            time.sleep(float(act["sleep"]))
        elif "chat" in act:
            _chat(act["chat"], act.get("model", "scripted-model"))
        elif "exit" in act:
            return int(act["exit"])
        elif act.get("hang"):
            while True:
                time.sleep(3600)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
