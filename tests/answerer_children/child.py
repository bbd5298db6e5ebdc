"""A stand-in for the operator's answerer command (never a real model).

`child.py MODE [ARG]` reads the stdin JSON (docs/design/answerer.md) and behaves as MODE says.
When ANSWERER_TEST_DIR
is in its environment (the tests list it in SEMULA_ANSWERER_ENV), it records what it saw there,
outside its own temporary working directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

VALID = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
INVALID = {"tool_calls": [{"name": "get_weather", "arguments": {"town": "Paris"}}]}


def parent_name() -> str:
    with open(f"/proc/{os.getppid()}/comm") as f:
        return f.read().strip()


def write_atomically(path: str, text: str) -> None:
    with open(path + ".part", "w") as f:
        f.write(text)
    os.replace(path + ".part", path)


# A process that ignores SIGTERM and sleeps: what an escaped descendant does.
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"


def escape(how: str) -> int:
    """Leave the child's process group: setsid(), or a double fork; the pid of what is left running."""
    if how != "double-fork":
        return subprocess.Popen(
            [sys.executable, "-c", STUBBORN],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ).pid
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        last = os.fork()
        if last == 0:
            os.close(read)
            os.close(write)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            # Without the call's mark too (a clean environment): only its place in the tree is left.
            os.execve(sys.executable, [sys.executable, "-c", STUBBORN], {})
        os.write(write, str(last).encode())
        os._exit(0)
    os.close(write)
    pid = int(os.read(read, 64))
    os.close(read)
    os.waitpid(middle, 0)
    return pid


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def snoop(secrets: str, paths: list[str]) -> dict[str, str]:
    """Open each route; whether it opened and held any of the `|`-separated secrets (never the text).

    `@PATH` instead of the secrets: read them from that file, so they are not in this argv."""
    if secrets.startswith("@"):
        with open(secrets[1:]) as f:
            secrets = f.read()
    wanted = [s.encode() for s in secrets.split("|") if s]
    # The parent is the call's supervisor, its parent the daemon: both are tried, and our own environment.
    routes = [
        f"/proc/{pid}/{part}"
        for pid in (os.getppid(), parent_of(os.getppid()))
        for part in ("environ", "mem", "maps")
    ]
    routes += ["/proc/self/environ", *paths]
    found = {}
    for route in routes:
        try:
            with open(route, "rb") as f:
                data = f.read(1 << 20) if not route.endswith("/mem") else b""
        except OSError as exc:
            found[route] = f"refused:{exc.errno}"
            continue
        found[route] = "secret" if any(secret in data for secret in wanted) else "opened"
    return found


def main() -> int:
    mode = sys.argv[1]
    arg = sys.argv[2] if len(sys.argv) > 2 else ""
    raw = sys.stdin.read()
    doc = json.loads(raw)
    out_dir = os.environ.get("ANSWERER_TEST_DIR")
    tag = f"{doc['pending_id']}-{doc['attempt']}"
    # A child may echo its prompt to stderr; the daemon must discard it, never log it.
    print(f"child-stderr-marker {raw}", file=sys.stderr, flush=True)
    if out_dir:
        with open(os.path.join(out_dir, f"runs-{doc['pending_id']}"), "a") as f:
            f.write(f"{doc['attempt']}\n")
        # Written whole or not at all: the tests poll for these files while the child runs.
        write_atomically(os.path.join(out_dir, f"pid-{tag}"), str(os.getpid()))
        write_atomically(os.path.join(out_dir, f"stdin-{tag}.json"), raw)

    if mode == "snoop":
        # Try to read the daemon's secrets through the filesystem; answer with what could be read
        # (whether each route opened, and whether the secret ARG was in it), never the text itself.
        print(json.dumps({"content": json.dumps(snoop(arg, sys.argv[3:]))}))
    elif mode == "escape":
        # ARG: setsid, double-fork, or ignore-term[+setsid|+double-fork] (a child that ignores
        # SIGTERM, with an escaped grandchild that does too), or kill-parent+HOW (a child that
        # kills its supervisor). It records its pid, what it left running and its directory.
        stubborn, _, how = arg.partition("+")
        if stubborn == "ignore-term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        left = escape(how or arg)
        write_atomically(
            os.path.join(out_dir, f"escaped-{doc['pending_id']}"), f"{os.getpid()} {left} {os.getcwd()}"
        )
        print("answered", flush=True)
        if stubborn == "kill-parent":
            # Kill the call's supervisor (the same user may), then linger.
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(300)
        if stubborn == "ignore-term":
            time.sleep(300)
    elif mode == "echo":
        print(f"  {arg}  ")
    elif mode == "json":
        print(json.dumps(VALID))
    elif mode == "sleep":
        time.sleep(float(arg))
        print("slept")
    elif mode == "grandchild":
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        with open(os.path.join(out_dir, f"pids-{doc['pending_id']}"), "w") as f:
            f.write(f"{os.getpid()} {grandchild.pid}")
        print("partial answer", flush=True)
        time.sleep(300)
    elif mode == "flood":
        with open(os.path.join(out_dir, f"pids-{doc['pending_id']}"), "w") as f:
            f.write(str(os.getpid()))
        sys.stdout.write("x" * (2 * 1024 * 1024))
        sys.stdout.flush()
        time.sleep(300)
    elif mode == "answer-if":
        # Answer calls whose last message holds ARG; fail the others.
        if arg not in doc["request"]["messages"][-1]["content"]:
            return 1
        print("answered")
    elif mode == "exit1":
        print("an answer that must not be used")
        return 1
    elif mode == "silent":
        pass
    elif mode == "dump":
        seen = {
            "env": dict(os.environ),
            "cwd": os.getcwd(),
            "cwd_listing": os.listdir("."),
            "argv": sys.argv[1:],
            "parent": parent_name(),
            "session_leader": os.getsid(0) == os.getpid(),
        }
        with open(os.path.join(out_dir, f"dump-{doc['pending_id']}.json"), "w") as f:
            json.dump(seen, f)
        print("dumped")
    elif mode == "reject":
        # ARG once: a wrong answer on attempt 1, a right one on attempt 2. ARG always: wrong twice.
        wrong = arg == "always" or doc["attempt"] == 1
        print(json.dumps(INVALID if wrong else VALID))
    elif mode == "overlap":
        # Record when this run starts and ends, to check two daemons never run one call at once.
        with open(os.path.join(out_dir, "runs.log"), "a") as f:
            f.write(f"start {doc['pending_id']} {time.time():.6f}\n")
        time.sleep(float(arg or 0.2))
        with open(os.path.join(out_dir, "runs.log"), "a") as f:
            f.write(f"end {doc['pending_id']} {time.time():.6f}\n")
        print(f"answer for {doc['pending_id']}")
    else:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
