"""Copied and run by `test_fork_server.py` as ``python -m fork_probe``, and forked as an endpoint
is: it prints what a process started so can see of how it was started, then exits 3 through
``atexit``."""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys

facts = {
    "name": __name__,
    "argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]],
    "cwd": os.getcwd(),
    "path0": sys.path[0],
    "env": {name: value for name, value in os.environ.items() if name.startswith("PROBE_")},
    "leads_its_session": os.getsid(0) == os.getpid(),
    "stdin": os.path.realpath(f"/proc/self/fd/{sys.stdin.fileno()}"),
    "open_fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2),
    "signals": {
        sig.name: repr(signal.getsignal(sig)) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)
    },
}
atexit.register(print, "atexit ran", flush=True)
print(json.dumps(facts), flush=True)
raise SystemExit(3)
