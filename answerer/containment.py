"""Linux process containment for the answerer's children: no descendant outlives its call.

A child's process group is not enough: a grandchild that calls setsid() or double-forks leaves it,
and a child that ignores SIGTERM outlives a daemon killed with -9. So each call's command runs
under a supervisor (answerer/supervise.py), a child subreaper that kills its whole tree when the
call ends or the daemon dies. Behind it, every child is marked (an environment variable its
descendants inherit), and after each call the daemon kills every process that carries the call's
mark or descends from the supervisor; the daemon is a subreaper too, so what a killed supervisor
leaves comes back to it rather than to PID 1. On start the daemon kills what a killed predecessor
left and removes its temporary directories. docs/design/answerer.md, decisions 0028 and 0042."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
from collections.abc import Collection, Iterator

logger = logging.getLogger("semula.answerer")

MARK = "ANSWERER_CALL"
DIR_PREFIX = "semula-answerer-"
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
# A fork bomb could outrun one pass of killing; SIGKILL'd processes cannot fork, so few passes do.
_MAX_PASSES = 100

_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)


def _read(path: str) -> bytes:
    # Plain open(), not pathlib: each call's supervisor imports this module, and start-up time counts.
    with open(path, "rb") as f:
        return f.read()


def prctl(option: int, value: int) -> None:
    if _prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def harden_daemon() -> None:
    """Make this process (the daemon, or a call's supervisor) not dumpable and a child subreaper.

    Not dumpable: a process of the same user (a child) can no longer open its /proc/<pid>/environ,
    mem or maps, where the server's secrets are (docs/design/answerer.md). It does not stop this
    process reading its children's /proc entries: the check is on the process being read. Subreaper: its
    children's orphans re-parent to it, not to PID 1.
    """
    prctl(_PR_SET_DUMPABLE, 0)
    prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _start_time(pid: int) -> str | None:
    try:
        stat = _read(f"/proc/{pid}/stat").decode()
    except OSError:
        return None
    # Field 22 (after the parenthesised name, which may hold spaces): start time since boot.
    return stat.rsplit(")", 1)[1].split()[19]


def identity(pid: int | None = None) -> str:
    """This process as `pid-starttime`: unlike a pid alone, never the same for two processes."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{_start_time(pid)}"


def new_mark() -> str:
    """A call's mark: the daemon's identity (so a successor can tell it died) and a random part."""
    return f"{identity()}-{os.urandom(8).hex()}"


def _owner_alive(mark_or_dir: str) -> bool:
    pid, start = mark_or_dir.split("-")[:2]
    return pid.isdigit() and _start_time(int(pid)) == start


def _stat(pid: int) -> tuple[int, str] | None:
    try:
        fields = _read(f"/proc/{pid}/stat").decode().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[0]


def _mark_of(pid: int) -> str | None:
    try:
        environ = _read(f"/proc/{pid}/environ")
    except OSError:
        return None
    prefix = MARK.encode() + b"="
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode("ascii", "replace")
    return None


def _processes() -> Iterator[tuple[int, int, str]]:
    """(pid, ppid, state) of every process now."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                yield int(entry.name), *stat


def _victims(
    mark: str | None, root: int | None, adopt: bool, spare: Collection[int], keep: Collection[str]
) -> set[int]:
    me = os.getpid()
    table = {pid: (ppid, state) for pid, ppid, state in _processes() if pid != me}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    for pid, (ppid, state) in table.items():
        if state == "Z" or pid in spare:
            continue
        # Environments are read only when a mark decides (a call's supervisor needs its tree only).
        marked = _mark_of(pid) if mark is not None or adopt else None
        # An orphan of ours (we are a subreaper) that no running call claims belongs to the call ending.
        if (mark is not None and marked == mark) or (adopt and ppid == me and marked not in keep):
            found.add(pid)
    stack = [root, *found] if root is not None else list(found)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found and child not in spare and table[child][1] != "Z":
                found.add(child)
                stack.append(child)
    return found


def sweep(
    mark: str | None,
    *,
    root: int | None = None,
    adopt: bool = False,
    spare: Collection[int] = (),
    keep: Collection[str] = (),
) -> int:
    """SIGKILL every process marked `mark` (None: none) or descending from `root` (and, when `adopt`,
    every orphan of ours no running call claims), until none is left; reap those that are ours.
    `spare` (other calls' children) and processes marked with a `keep` mark are left alone.
    Returns how many died."""
    killed: set[int] = set()
    for _ in range(_MAX_PASSES):
        victims = _victims(mark, root, adopt, spare, keep)
        if not victims:
            break
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        killed |= victims
    reap(spare)
    return len(killed)


def reap(spare: Collection[int] = ()) -> None:
    """Collect the exit status of our exited children that no Popen waits for (adopted orphans)."""
    me = os.getpid()
    for pid, ppid, state in list(_processes()):
        if ppid == me and state == "Z" and pid not in spare:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def clean_predecessors(tmp_root: str) -> None:
    """Kill what a daemon that died (say, by SIGKILL) left running, and remove its temporary dirs."""
    killed = 0
    for pid, _, state in list(_processes()):
        mark = _mark_of(pid) if state != "Z" else None
        if mark and not _owner_alive(mark):
            killed += sweep(mark)
    removed = 0
    for entry in os.scandir(tmp_root):
        name = entry.name
        if name.startswith(DIR_PREFIX) and entry.is_dir(follow_symlinks=False):
            owner = name[len(DIR_PREFIX) :]
            if owner.count("-") >= 2 and not _owner_alive(owner):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed += 1
    if killed or removed:
        logger.warning("predecessor_cleaned", extra={"processes": killed, "directories": removed})
