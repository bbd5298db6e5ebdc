"""One call's supervisor: runs the operator's command, and kills everything it started when the call ends.

The daemon does not parent the command itself. It runs, per call,

    python -I -S answerer/supervise.py FD WORKDIR -- ARGV...

with the command's stdin and stdout pipes as this process's own, and one end of a socket pair as
FD; the daemon holds the other end and nothing else does. This process makes itself a child
subreaper, so every descendant of the command, whatever it does (setsid, a double fork, ignoring
SIGTERM), stays in its tree or is re-parented to it. It ends the call when the command exits, or
when the socket reaches end-of-file: the daemon closed it (the call's timeout, the output cap, a
stop) or the daemon died (SIGKILL included: the kernel closes a dead process's descriptors). Either
way it SIGKILLs every descendant until none is left, reaps them, removes the call's temporary
directory, reports `exit:N`, `signal:N` or `exec_failed:ERRNO` on the socket, and exits.
docs/decisions/0042-answerer-supervisor-and-http-mode.md.

Run with `-I -S` (no PYTHON* variable, no site-packages: a quick start) and the command's
environment only, so it needs just the standard library and answerer.containment, found from this
file's own place.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import shutil
import signal
import sys

if __package__ in (None, ""):
    # Run by path (python -I -S answerer/supervise.py): the package is beside this file, not on a path.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from answerer import containment  # noqa: E402

STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE)


def spawn(argv: list[str]) -> int:
    """Start the command in a session of its own on this process's stdin, stdout and stderr."""
    # The signals this process ignores are the command's to decide again (posix_spawn keeps SIG_IGN).
    return os.posix_spawnp(argv[0], argv, os.environ, setsid=True, setsigdef=STOPS)


def wait_for_end(command: int, control: int) -> int | None:
    """Block until the command exits (its wait status) or the socket says stop (None)."""
    exit_fd = os.pidfd_open(command)
    try:
        while True:
            ready, _, _ = select.select([exit_fd, control], [], [])
            if exit_fd in ready:
                return os.waitpid(command, 0)[1]
            # End-of-file (the daemon closed its end, or died) or any byte: end the call now.
            return None
    finally:
        os.close(exit_fd)


def kill_everything() -> None:
    """SIGKILL every descendant (all are in this subreaper's tree) until none is left; reap them all."""
    while True:
        # The tree is all there is: a subreaper's descendants cannot leave it, whatever their mark.
        containment.sweep(None, root=os.getpid())
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def report(control: int, status: str) -> None:
    # The daemon may be gone: nobody to tell then.
    with contextlib.suppress(OSError):
        os.write(control, status.encode() + b"\n")


def main(args: list[str]) -> int:
    control, workdir, argv = int(args[0]), args[1], args[3:]
    assert args[2] == "--" and argv
    # The command must not hold the daemon's line; nor may it read or trace this process.
    os.set_inheritable(control, False)
    containment.harden_daemon()
    # A stop from the daemon is the socket; signals from the terminal or the command are ignored.
    for sig in STOPS:
        signal.signal(sig, signal.SIG_IGN)
    status = "killed"
    try:
        try:
            command = spawn(argv)
        except OSError as exc:
            status = f"exec_failed:{errno.errorcode.get(exc.errno or 0, 'unknown')}"
        else:
            # Only the command (and what it starts) holds the pipes now: their end is its end.
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            os.dup2(devnull, 1)
            code = wait_for_end(command, control)
            if code is not None:
                status = (
                    f"exit:{os.WEXITSTATUS(code)}" if os.WIFEXITED(code) else f"signal:{os.WTERMSIG(code)}"
                )
    finally:
        kill_everything()
        shutil.rmtree(workdir, ignore_errors=True)
    report(control, status)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
