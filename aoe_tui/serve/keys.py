"""Host key and authorized_keys handling for ``aoe serve``.

* :func:`ensure_host_key` loads the server's private host key, generating an
  Ed25519 key (OpenSSH format, mode 0600, written atomically) on first start.
* :func:`load_authorized_keys` reads an OpenSSH ``authorized_keys`` file
  (``sshd(8)`` AUTHORIZED_KEYS FILE FORMAT, options such as ``from=`` honoured by
  asyncssh).

Errors are :class:`ServeError` (an :class:`~aoe_tui.errors.AoeError`) naming the file.
No key material is ever logged: only SHA256 fingerprints.
"""

from __future__ import annotations

import stat
from pathlib import Path

import asyncssh

from aoe_tui.errors import AoeError
from aoe_tui.fsio import write_atomic

__all__ = ["ServeError", "ensure_host_key", "load_authorized_keys", "fingerprint"]


class ServeError(AoeError):
    """A bad ``aoe serve`` input: host key, authorized_keys, season folder or port."""


def fingerprint(key: asyncssh.SSHKey) -> str:
    """``SHA256:...`` fingerprint of a public or private key (safe to log)."""
    return key.get_fingerprint("sha256")


def ensure_host_key(path: Path) -> tuple[asyncssh.SSHKey, bool]:
    """Load the private host key at ``path``; create it if missing.

    Returns ``(key, created)``. A new key is Ed25519, written in OpenSSH format to
    ``path`` with mode 0600 via a temporary file + fsync + rename (the parent
    folder is created with mode 0700 if needed). An existing key is kept as is;
    one readable by group/others is refused (like sshd). Raises :class:`ServeError`
    on an unreadable/invalid key or an unwritable folder.
    """
    path = Path(path)
    if path.is_dir():
        raise ServeError(f"{path}: is a folder; --host-key wants a key file (created if missing), e.g. {path / 'host_key'}")
    if path.exists():
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError as err:
            raise ServeError(f"{path}: cannot stat host key: {err.strerror}") from None
        if mode & 0o077:
            raise ServeError(f"{path}: host key is accessible by others (mode {mode:04o}); chmod 600 it")
        try:
            return asyncssh.read_private_key(str(path)), False
        except (OSError, ValueError, asyncssh.KeyImportError) as err:
            raise ServeError(f"{path}: not a readable unencrypted private key: {err}") from None
    key = asyncssh.generate_private_key("ssh-ed25519", comment="aoe-serve host key")
    data = key.export_private_key("openssh")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, data, mode=0o600)
    except OSError as err:
        raise ServeError(f"{path}: cannot write host key: {err.strerror}") from None
    return key, True


def load_authorized_keys(path: Path) -> asyncssh.SSHAuthorizedKeys:
    """Parse the OpenSSH ``authorized_keys`` file at ``path``.

    Raises :class:`ServeError` if it is missing, unreadable, invalid or holds no key.
    Called again on every login attempt, so edits apply without a restart.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ServeError(f"{path}: authorized_keys file not found") from None
    except IsADirectoryError:
        raise ServeError(f"{path}: is a folder; --authorized-keys wants an OpenSSH authorized_keys file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ServeError(f"{path}: cannot read authorized_keys: {err}") from None
    if not any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines()):
        raise ServeError(f"{path}: authorized_keys holds no key (nobody could log in)")
    try:
        return asyncssh.import_authorized_keys(text)
    except (ValueError, asyncssh.KeyImportError) as err:
        raise ServeError(f"{path}: invalid authorized_keys: {err}") from None
