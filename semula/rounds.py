"""Rounds: what callers ask for while one like it is in flight, done together by the next one.

A caller joins the round not sent yet of its group; when no round of the group is in flight, its
round goes at once, else it waits for the one in flight to end and then either finds its own round
done (another caller sent it) or sends it. So what a caller gets comes from work that began after it
asked, as work of its own would, and one round per group is in flight at a time. Used by the
PostgreSQL store's reads (a kept hit's change counter, first sights' entries) and by the session
calls the server counts (semula.service.sequences.Counts).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from semula.db import Unavailable


class Round:
    """One round's state; subclasses hold what is asked and what was found."""

    __slots__ = ("done", "error", "_ended")

    def __init__(self) -> None:
        self.done = False  # set under Rounds' lock, with _ended released
        self.error: BaseException | None = None  # what every caller of the round raises
        # Held from the round's making until it is done, so waiting for it is taking it (and handing
        # it on): a lock costs a tenth of what a threading.Event does to make, and a round is made
        # for every call that finds none open (each kept hit on PostgreSQL, each first sight).
        self._ended = threading.Lock()
        self._ended.acquire()

    def wait(self) -> None:
        with self._ended:
            pass

    def end(self) -> None:
        self.done = True
        self._ended.release()


R = TypeVar("R", bound=Round)
T = TypeVar("T")


class Rounds(Generic[R]):
    def __init__(self, make: Callable[[], R]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._open: dict[Hashable, R] = {}  # per group, the round not sent yet
        self._flying: dict[Hashable, R] = {}  # per group, the round being done

    def join(self, group: Hashable, ask: Callable[[R], T], send: Callable[[R], None]) -> tuple[R, T]:
        """Join `group`'s open round (`ask(round)`, under the lock, records what this caller wants and
        returns what it needs to find its answer) and wait until it is done; `send(round)` does a
        round. Raises the round's error."""
        with self._lock:
            round_ = self._open.get(group)
            if round_ is None:
                round_ = self._open[group] = self._make()
            asked = ask(round_)
        while True:
            with self._lock:
                if round_.done:
                    break
                flying = self._flying.get(group)
                if flying is None:  # nothing in flight: ours is the round not sent yet, and it goes now
                    self._flying[group] = round_
                    del self._open[group]
            if flying is None:
                self._send(group, round_, send)
                break
            flying.wait()  # the round in flight (ours, or one that began before we asked)
        if round_.error is not None:
            raise round_.error
        return round_, asked

    def waiting(self, group: Hashable) -> R | None:
        """The round of `group` not sent yet (tests look at what it holds)."""
        return self._open.get(group)

    def flying(self, group: Hashable) -> bool:
        return group in self._flying

    def idle(self) -> bool:
        """No round open or in flight (none left behind by its callers)."""
        return not self._open and not self._flying

    def _send(self, group: Hashable, round_: R, send: Callable[[R], None]) -> None:
        try:
            send(round_)
        except Exception as exc:
            round_.error = exc  # every caller of the round raises it, this one in join()
        except BaseException as exc:  # this greenlet or thread is being stopped: the others need not be
            round_.error = Unavailable(type(exc).__name__)
            raise
        finally:
            with self._lock:  # sent and not yet done is always in flight (join() relies on it)
                del self._flying[group]
                round_.end()
