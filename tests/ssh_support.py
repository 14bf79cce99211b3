"""A real SSH server in the test process, for tests of our SSH clients without a guest.

* :func:`password_server` — an asyncssh server on ``127.0.0.1`` (a free TCP port, a fresh
  ed25519 host key) that takes a password login when ``check(username, password)`` says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncssh

__all__ = ["password_server"]


async def password_server(check: Callable[[str, str], bool], *, port: int = 0,
                          **kw: Any) -> tuple[asyncssh.SSHAcceptor, int]:
    """Start the server on ``port`` (0: a free one; a given one is listened on again with
    ``SO_REUSEADDR``, as a rebooted guest's sshd does); ``kw`` goes to
    :func:`asyncssh.create_server` (``process_factory``, ``encoding``...). Returns
    ``(server, port)``; the caller closes the server. Raises ``OSError`` when it cannot listen."""

    class Server(asyncssh.SSHServer):
        def begin_auth(self, username: str) -> bool:
            return True

        def password_auth_supported(self) -> bool:
            return True

        def validate_password(self, username: str, password: str) -> bool:
            return check(username, password)

    key = asyncssh.generate_private_key("ssh-ed25519")
    server = await asyncssh.create_server(Server, "127.0.0.1", port, server_host_keys=[key],
                                         reuse_address=True, **kw)
    return server, server.sockets[0].getsockname()[1]
