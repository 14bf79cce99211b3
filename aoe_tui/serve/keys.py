"""Host key and authorized_keys handling for ``aoe serve``.

* :func:`ensure_host_key` loads the server's private host key, generating an
  Ed25519 key (OpenSSH format, mode 0600, written atomically) on first start.
* :func:`load_authorized_keys` reads an OpenSSH ``authorized_keys`` file
  (``sshd(8)`` AUTHORIZED_KEYS FILE FORMAT) to check it at start;
* :func:`grant_for` finds the line a client key logs in by and what its options allow
  (:class:`KeyGrant`): OpenSSH's meaning for every option this server can honour, a
  refusal (with the reason, for the log) for an expired line, an unknown option or one
  it cannot check. Table: ``docs/serving.md``, "authorized_keys options".

Errors are :class:`ServeError` (an :class:`~aoe_tui.errors.AoeError`) naming the file.
No key material is ever logged: only SHA256 fingerprints.
"""

from __future__ import annotations

import calendar
import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from aoe_tui.errors import AoeError
from aoe_tui.fsio import write_atomic

__all__ = ["ServeError", "KeyGrant", "AuthorizedKeysFile", "ensure_host_key", "load_authorized_keys", "fingerprint",
           "grant_for"]


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


#: options a spectator server honours as sshd(8) means them (names as OpenSSH spells them;
#: asyncssh's parser keeps the case, and enforces ``from=`` only when spelled so). The
#: forwarding, agent, X11, tunnel and rc options change nothing here: this server never
#: forwards, never runs a shell nor an rc file, whatever the key says.
_FLAGS = {"restrict", "pty", "no-pty", "agent-forwarding", "no-agent-forwarding", "port-forwarding",
          "no-port-forwarding", "X11-forwarding", "no-X11-forwarding", "user-rc", "no-user-rc",
          "no-touch-required", "cert-authority"}
_VALUED = {"command", "environment", "expiry-time", "from", "permitopen", "permitlisten", "principals", "tunnel"}
#: known to OpenSSH but not checkable here: the line is refused rather than half honoured
_UNCHECKABLE = {"verify-required": "verify-required (FIDO user verification) cannot be checked by this server"}
_EXPIRY = re.compile(r"^(\d{8})(\d{4})?(\d{2})?(Z)?$")


@dataclass(frozen=True)
class KeyGrant:
    """What an ``authorized_keys`` line lets its key do on a spectator server.

    ``line``: its 1-based line number (not compared: two grants are equal when they allow the
    same, wherever their line moved to); ``pty``: a terminal may be allocated (false under
    ``no-pty`` or ``restrict`` without a later ``pty``); ``command``: the forced command
    (``command="…"``), run whatever the client asked, or None; ``expires``: the
    ``expiry-time`` as a Unix time in s, or None.
    """

    line: int = field(compare=False)
    pty: bool = True
    command: str | None = None
    expires: float | None = None


def parse_expiry(value: str) -> float:
    """An ``expiry-time`` value (``YYYYMMDD[HHMM[SS]]``, local time, or UTC with a trailing
    ``Z``, as sshd(8) reads it) as a Unix time in s. Raises ``ValueError`` on another shape."""
    m = _EXPIRY.match(value.strip())
    if not m:
        raise ValueError(f"bad expiry-time {value!r} (want YYYYMMDD[HHMM[SS]][Z])")
    digits = m.group(1) + (m.group(2) or "0000") + (m.group(3) or "00")
    try:
        tm = time.strptime(digits, "%Y%m%d%H%M%S")
    except ValueError:
        raise ValueError(f"bad expiry-time {value!r} (not a date)") from None
    if m.group(4):
        return float(calendar.timegm(tm))
    return time.mktime(tm)


def _grant(options: dict, line: int, now: float) -> KeyGrant | str:
    """The grant of a line whose key and ``from=`` matched, or why it is refused (one line)."""
    pty = True
    command = None
    expires = None
    for name, value in options.items():  # asyncssh keeps the file's order (dict insertion)
        if name in _UNCHECKABLE:
            return f"line {line}: {_UNCHECKABLE[name]}"
        if name in _FLAGS:
            if value is not True:
                return f"line {line}: option {name!r} takes no value"
            if name in ("restrict", "no-pty"):
                pty = False
            elif name == "pty":
                pty = True
            continue
        if name not in _VALUED:
            return f"line {line}: unknown option {name!r}"
        if value is True:
            return f"line {line}: option {name!r} needs a value"
        if name == "command":
            command = str(value)
        elif name == "expiry-time":
            try:
                expires = min(parse_expiry(v) for v in value)
            except ValueError as err:
                return f"line {line}: {err}"
            if expires <= now:
                when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
                return f"line {line}: expired at {when}"
    return KeyGrant(line=line, pty=pty, command=command, expires=expires)


class AuthorizedKeysFile:
    """An ``authorized_keys`` file parsed line by line, re-read when it changes on disk.

    :meth:`grant` answers for one key and client address; :meth:`refresh` re-reads the file
    if its size, mtime or inode changed (returns whether it did). A file that is missing
    grants nothing; one that cannot be read raises :class:`ServeError` naming it.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._sig: tuple | None = None
        self._lines: list[tuple[int, asyncssh.SSHAuthorizedKeys]] = []

    @property
    def missing(self) -> bool:
        """The file was missing at the last :meth:`refresh` (it grants nothing)."""
        return self._sig is None

    def refresh(self) -> bool:
        try:
            st = os.stat(self.path)
            sig: tuple | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            sig = None
        except OSError as err:
            raise ServeError(f"{self.path}: cannot read authorized_keys: {err.strerror}") from None
        if sig == self._sig and (sig is not None or not self._lines):
            return False
        lines: list[tuple[int, asyncssh.SSHAuthorizedKeys]] = []
        if sig is not None:
            try:
                text = self.path.read_text(encoding="utf-8")
            except FileNotFoundError:
                text = ""
            except (OSError, UnicodeDecodeError) as err:
                raise ServeError(f"{self.path}: cannot read authorized_keys: {err}") from None
            for n, raw in enumerate(text.splitlines(), 1):
                raw = raw.strip()
                if not raw or raw.startswith("#"):
                    continue
                try:  # sshd skips a line it cannot parse, and so do we
                    lines.append((n, asyncssh.import_authorized_keys(raw)))
                except (ValueError, asyncssh.KeyImportError):
                    continue
        self._sig, self._lines = sig, lines
        return True

    def grant(self, key: asyncssh.SSHKey, addr: str, now: float | None = None) -> tuple[KeyGrant | None, str]:
        """``(grant, "")`` for the first line naming ``key`` whose ``from=`` admits ``addr``
        and whose options this server honours (as sshd, a refused line does not hide a later
        one), else ``(None, why)``: ``"not in authorized_keys"`` or the refused lines'
        reasons (``"line 3: expired at …"``, ``"line 4: unknown option 'x'"``)."""
        now = time.time() if now is None else now
        refusals: list[str] = []
        for n, one in self._lines:
            options = one.validate(key, addr, addr)
            if options is None:
                continue
            got = _grant(dict(options), n, now)
            if isinstance(got, KeyGrant):
                return got, ""
            refusals.append(got)
        return None, "; ".join(refusals) or "not in authorized_keys"


def grant_for(path: Path, key: asyncssh.SSHKey, addr: str, now: float | None = None) -> tuple[KeyGrant | None, str]:
    """:meth:`AuthorizedKeysFile.grant` on the file at ``path`` read now."""
    keys = AuthorizedKeysFile(path)
    keys.refresh()
    return keys.grant(key, addr, now)
