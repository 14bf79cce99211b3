"""Exec helper run in each spectator child: make stdin (the PTY slave) the
controlling terminal of the new session, then exec the real command.

Usage: ``python -I -S _ctty.py PROGRAM ARG...``. Run as a file (not ``-m``) so it
imports nothing from the project; spawned with ``start_new_session=True``, so it is
already a session leader. With a controlling terminal the kernel delivers SIGWINCH
on resize and SIGHUP when the server closes the PTY master (no orphans even if the
server is killed).
"""

import fcntl
import os
import sys
import termios

fcntl.ioctl(0, termios.TIOCSCTTY, 0)
os.execv(sys.argv[1], sys.argv[1:])
