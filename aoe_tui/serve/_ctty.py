"""Exec helper run in each spectator child: apply the spectator CPU placement, make
stdin (the PTY slave) the controlling terminal of the new session, then exec the
real command.

Usage: ``python -I -S _ctty.py [--cpus 1,2] [--priority idle|low] -- PROGRAM ARG...``
(the options come from :meth:`aoe_tui.serve.placement.Placement.ctty_args`). Run as
a file (not ``-m``) so it imports nothing from the project; spawned with
``start_new_session=True``, so it is already a session leader. With a controlling
terminal the kernel delivers SIGWINCH on resize and SIGHUP when the server closes
the PTY master (no orphans even if the server is killed). A placement that cannot
be applied is skipped: the spectator still starts.
"""

import fcntl
import os
import signal
import sys
import termios

args = sys.argv[1:]
while args and args[0] != "--":
    opt, value, args = args[0], args[1], args[2:]
    try:
        if opt == "--cpus":
            os.sched_setaffinity(0, {int(c) for c in value.split(",")})
        elif opt == "--priority" and value == "idle":
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        elif opt == "--priority" and value == "low":
            os.setpriority(os.PRIO_PROCESS, 0, max(os.getpriority(os.PRIO_PROCESS, 0), 10))
    except OSError:
        pass
args = args[1:]
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a repaint request before the app handles it
os.execv(args[0], args)
