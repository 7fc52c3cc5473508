"""The kernel actors of one Ray run, kept up under faults (:class:`ActorPool`, used by
:mod:`._ray`).

Ray is asked to retry nothing by itself (the actors are made with ``max_restarts=0``
and ``max_task_retries=0``). A restart in place does not survive the loss of a node: the
calls are sent again to the dead actor's address and the retries are spent within a
second, long before the cluster has declared the node dead. Instead a call on an actor
whose process or node is gone fails as soon as Ray knows (``ActorUnavailableError`` when
the connection drops, ``ActorDiedError`` once the cluster has declared it dead), and the
pool decides what follows:

* the lost actor is dropped (and killed), the answers it sent are kept, and every call
  queued or running on it goes back to the front of the queue, for the actors that are
  left, each sent again to an idle actor with nothing queued behind it. A loss counts
  against the item the actor was computing (its oldest call not answered), and an item
  lost with more than :data:`MAX_RETRIES` actors fails the run (a block that kills
  whatever computes it must not go round the cluster for ever);
* a new actor is asked for in its place, and fed only once it is placed and built (its
  :meth:`~._ray_worker.KernelWorker.where` answered), so an actor that cannot be placed
  holds no block;
* placing is bounded (``KERNELCLI_RAY_WAIT_SECONDS``, default 120 s): an actor not placed
  by then is given up while others compute (the run goes on with fewer), and with no
  actor at all the run fails with one line naming what the cluster lacks and how many
  actors it placed.

Until Ray's own health checks declare a dead node dead (about 15 s for a node that
refuses connections, with Ray's defaults) its resources still count, and an actor asked
for meanwhile may wait for them; the bound covers that. Which actor computes a block
changes nothing in its bits (each runs the same per-block code on the same inputs with
the plan's pair batch), so neither a loss nor the number of actors shows in the result.

What the pool sees is a :class:`ClusterState`, given to its watcher at each change: the
words the progress line shows ("waiting for 1 actor (cluster has 0 CPUs free); 1 node
lost, 2 blocks requeued") and what ``status`` shows (the driver's ``shards/ray.json``).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

from .. import _env
from .._stop import Stop, check
from ..errors import ComputeError

MAX_RETRIES = 3  # actors one item may be lost with; the next loss fails the run
PER_ACTOR = 2    # calls queued on one actor: one computing, the next already shipped
GRACE = 3.0      # seconds an actor may take to start before the progress line says so
POLL = 0.5       # the wait loop's period: a stop is honoured within it
LOOK = 2.0       # seconds between looks at the cluster (free resources, dead nodes)
SETTLE = 1.0     # seconds a lost actor's other calls are given to answer or fail


def _s(n) -> str:
    return "" if n == 1 else "s"


def describe(exc) -> str:
    """One line of a Ray error: its cause's, when it wraps one."""
    cause = getattr(exc, "cause", None)
    if cause is not None and cause is not exc:
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__


def is_lost(ray, exc: BaseException) -> bool:
    """Whether ``exc`` says the actor (its process or its node), or a result held on its
    node, is gone -- not that the call raised: that would raise again anywhere."""
    ex = ray.exceptions
    if isinstance(exc, ex.RayActorError):
        return not exc.actor_init_failed  # an error in __init__ would recur anywhere
    return isinstance(exc, (ex.ObjectLostError, ex.NodeDiedError, ex.WorkerCrashedError))


def first_sentence(text: str) -> str:
    return text.split(". ")[0].rstrip(".")


def item_of(entry: tuple):
    return entry[1]  # an in-flight call's (actor, item)


def ray_ready(ray, ref) -> bool:
    """Whether the call of ``ref`` has answered (or failed), without waiting."""
    return bool(ray.wait([ref], timeout=0)[0])


def call_failed(ray, exc: BaseException) -> Exception:
    """The error a failed call (not a lost actor) ends the run with."""
    if "RESOURCE_EXHAUSTED" in str(exc):  # a device out of memory on the worker: the
        # out-of-memory error of a local run (run/_finish.py), naming the budget
        return RuntimeError(f"RESOURCE_EXHAUSTED on a Ray worker: {describe(exc)}")
    if isinstance(exc, ray.exceptions.RayActorError):  # actor_init_failed
        return ComputeError(f"a kernel actor could not start on the Ray cluster: "
                            f"{describe(exc)}; completed tiles are kept")
    return ComputeError(f"a kernel actor's call failed on the Ray cluster: {describe(exc)}; "
                        f"completed tiles are kept")


@dataclass(frozen=True)
class ClusterState:
    """The pool as the progress line and ``status`` show it."""

    resource: str           # what one actor asks for: "CPU" or "GPU"
    planned: int            # actors the run asked for
    placed: int             # actors computing now
    waiting: int = 0        # asked for, and not placed after GRACE seconds
    given_up: int = 0       # not placed within the bound: the run goes on without them
    free: Optional[float] = None  # the cluster's free `resource` (looked at while waiting)
    nodes_lost: tuple = ()  # "127.0.0.1 (node 3f2a12c4)" of each node found dead
    actors_lost: int = 0    # actors lost (on those nodes, or their process alone)
    requeued: int = 0       # blocks (and row slices of the per-input pass) requeued

    @property
    def note(self) -> str:
        """What the progress line adds ("" while all is well)."""
        parts = []
        if self.waiting:
            free = "?" if self.free is None else f"{self.free:g}"
            parts.append(f"waiting for {self.waiting} actor{_s(self.waiting)} (cluster has "
                         f"{free} {self.resource}{_s(self.free)} free)")
        elif self.given_up:
            parts.append(f"on {self.placed} of {self.planned} actors")
        if self.actors_lost:
            n = len(self.nodes_lost)
            lost = (f"{n} node{_s(n)} lost" if n
                    else f"{self.actors_lost} actor{_s(self.actors_lost)} lost")
            parts.append(f"{lost}, {self.requeued} block{_s(self.requeued)} requeued")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        return dict(asdict(self), nodes_lost=list(self.nodes_lost), note=self.note)


class _Actor:
    """One kernel actor: its handle, the call that answers once it is placed and built,
    when it was asked for; once placed, its node; the calls queued on it."""

    def __init__(self, handle, ready, since: float):
        self.handle, self.ready, self.since = handle, ready, since
        self.live = False
        self.node: Optional[str] = None
        self.ip: Optional[str] = None
        self.sent: list = []  # refs of the calls not yet answered, in the order sent
        self.alone = False  # computing an item lost before: nothing is queued behind it


class ActorPool:
    """Up to ``planned`` actors made by ``make()`` (each asks for one ``resource``), fed
    by :meth:`run`; see the module docstring. ``wait``: the placing bound in seconds
    (default ``KERNELCLI_RAY_WAIT_SECONDS``). ``watch``: called with each new
    :class:`ClusterState`."""

    def __init__(self, ray, make: Callable[[], Any], planned: int, resource: str,
                 stop: Optional[Stop] = None, wait: Optional[float] = None):
        self.ray, self.make, self.resource, self.stop = ray, make, resource, stop
        self.planned, self.want = planned, 0
        self.wait = _env.ray_wait_seconds() if wait is None else wait
        self.members: list[_Actor] = []
        self.started = 0
        self.lost: list[_Actor] = []
        self.dead: dict = {}  # node id -> address, of the lost actors' nodes found dead
        self.given_up = self.requeued = 0
        self.inflight: dict = {}  # ref -> (actor, item)
        self.watch: Optional[Callable[[ClusterState], None]] = None
        self._shown: Optional[ClusterState] = None
        self._free: Optional[float] = None
        self._looked = -math.inf

    @property
    def handles(self) -> list:
        """The actors asked for and not lost (placed or not)."""
        return [a.handle for a in self.members]

    def grow(self, n: int) -> None:
        """Ask for actors until ``n`` (at most the plan's, less those given up) are there
        or on their way."""
        self.want = max(self.want, min(n, self.planned - self.given_up))
        self._ask()

    def _ask(self) -> None:
        limit = self.planned * (MAX_RETRIES + 1)  # replacements too are bounded
        while len(self.members) < self.want and self.started < limit:
            handle = self.make()
            self.members.append(_Actor(handle, handle.where.remote(), time.monotonic()))
            self.started += 1

    def call(self, method: str, *args):
        """One call on any actor (the planner's), waited for."""
        for _item, result in self.run([method], lambda h, m: getattr(h, m).remote(*args),
                                      name=lambda m: f"the call {m}"):
            return result

    def run(self, items: Iterable, submit: Callable, name: Callable[[Any], str],
            wanted: Callable[[Any], bool] = lambda item: True) -> Iterator[tuple]:
        """``(item, result)`` for each item of ``items`` that ``wanted`` accepts (asked
        just before it is first sent), in any order; ``submit(actor, item)`` sends one and
        returns its ref; ``name(item)`` names it in an error."""
        ray, inflight = self.ray, self.inflight
        todo = iter(items)
        again: deque = deque()  # lost calls' items, sent again first
        tries: dict[str, int] = {}  # name -> actors the item was lost with
        more = True

        def take(idle: bool) -> tuple:
            """The next item and whether it was lost before: such an item goes only to
            an idle actor, alone, so that a loss while it runs is its own."""
            nonlocal more
            if again and idle:
                return again.popleft(), True
            while more:
                item = next(todo, None)
                if item is None:
                    more = False
                elif wanted(item):
                    return item, False
            return None, False

        while True:
            check(self.stop)
            self._ask()
            self.settle()
            for actor in [a for a in self.members if a.live]:
                while len(actor.sent) < PER_ACTOR and not actor.alone:
                    item, actor.alone = take(idle=not actor.sent)
                    if item is None:
                        break
                    ref = submit(actor.handle, item)
                    inflight[ref] = (actor, item)
                    actor.sent.append(ref)
            if not inflight and not again and not more:
                return
            if not self.members:  # every actor lost, and no more may be started
                raise ComputeError(self._lacking(f"lost all {self.started} kernel actors the "
                                                 f"run started"))
            pending = [a.ready for a in self.members if not a.live]
            ready, _ = ray.wait(list(inflight) + pending, num_returns=1, timeout=POLL)
            for ref in ready:
                if ref not in inflight:
                    continue  # an actor placed: the next settle() takes it
                actor = inflight[ref][0]
                try:
                    result = self._answer(ref)
                except Exception as exc:  # noqa: BLE001 - Ray's errors, sorted here
                    if not is_lost(ray, exc):
                        raise
                    yield from self._lost(actor, exc, again, tries, name)
                    continue
                item = item_of(inflight.pop(ref))
                actor.sent.remove(ref)
                actor.alone = False
                yield item, result

    def _answer(self, ref):
        """The result of an answered call: Ray's error when the actor was lost, the run's
        error (:func:`call_failed`) when the call failed."""
        try:
            return self.ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - Ray's errors, sorted here
            if not is_lost(self.ray, exc):
                raise call_failed(self.ray, exc) from None
            raise

    def _lost(self, actor: _Actor, exc, again: deque, tries: dict, name) -> Iterator[tuple]:
        """``actor`` is lost: the results of its calls answered meanwhile are kept, the
        others go back to the queue. Only the oldest of those counts a loss: the one it
        was computing (an actor runs its calls in the order sent); the rest never ran.
        The others' answers, already on their way, are given a moment to arrive; an
        answer lost with the actor makes the blame uncertain once, and an item sent
        again runs alone (:meth:`run`), so its next loss is its own."""
        kept, back = [], []
        self.ray.wait(list(actor.sent), num_returns=len(actor.sent), timeout=SETTLE)
        for ref in actor.sent:
            item = item_of(self.inflight.pop(ref))
            if ray_ready(self.ray, ref):
                try:
                    kept.append((item, self._answer(ref)))
                    continue
                except Exception as err:  # noqa: BLE001 - Ray's errors, sorted here
                    if not is_lost(self.ray, err):
                        raise
            back.append(item)
        actor.sent = []
        self._drop(actor)
        for n, item in enumerate(back):
            if n == 0:
                key = name(item)
                tries[key] = tries.get(key, 0) + 1
                if tries[key] > MAX_RETRIES:
                    raise ComputeError(f"{key} was lost with {tries[key]} kernel actors on the "
                                       f"Ray cluster (their node or process died: "
                                       f"{first_sentence(describe(exc))}); completed tiles are "
                                       f"kept")
            self.requeued += 1
        again.extendleft(reversed(back))  # first in the queue, in their order
        self._ask()
        self._report()
        yield from kept

    def _drop(self, actor: _Actor) -> None:
        self.members.remove(actor)
        self.lost.append(actor)
        self._kill(actor)

    def _kill(self, actor: _Actor) -> None:
        try:
            self.ray.kill(actor.handle)
        except Exception:  # noqa: BLE001 - best effort: it may be gone with its node
            pass

    def settle(self, timeout: float = 0) -> None:
        """Take the actors placed meanwhile into service, give up those not placed
        within the bound (or fail, with none placed), tell the watcher of a change."""
        pending = [a for a in self.members if not a.live]
        if pending:
            refs = [a.ready for a in pending]
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=timeout)
            ready = set(ready)
            for actor in pending:
                if actor.ready in ready:
                    self._placed(actor)
        self._bound()
        self._report()

    def _placed(self, actor: _Actor) -> None:
        try:
            actor.node, actor.ip = self.ray.get(actor.ready)
            actor.live = True
        except Exception as exc:  # noqa: BLE001 - Ray's errors, sorted here
            if not is_lost(self.ray, exc):
                raise call_failed(self.ray, exc) from None
            self._drop(actor)  # lost before it was fed: nothing to requeue
            self._ask()

    def _bound(self) -> None:
        now = time.monotonic()
        late = [a for a in self.members if not a.live and now - a.since > self.wait]
        if not late:
            return
        if any(a.live for a in self.members):  # the run goes on with fewer actors
            for actor in late:
                self.members.remove(actor)
                self._kill(actor)
                self.given_up += 1
                self.want -= 1
        elif len(late) == len(self.members):
            lost = f" (and lost {len(self.lost)})" if self.lost else ""
            raise ComputeError(self._lacking(f"placed 0 of the {self.planned} kernel "
                                             f"actor{_s(self.planned)} the run asks for within "
                                             f"{self.wait:g} s{lost}"))

    def _lacking(self, what: str) -> str:
        """One line: what happened, and what the cluster lacks."""
        ray, res = self.ray, self.resource
        free = ray.available_resources().get(res, 0)
        total = ray.cluster_resources().get(res, 0)
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        return (f"the Ray cluster {what}: each needs 1 {res}, and the cluster has "
                f"{free:g} {res}{_s(free)} free of {total:g} on {nodes} live node{_s(nodes)}; "
                f"add nodes or free resources (or raise {_env.RAY_WAIT_SECONDS}) and run "
                f"the command again; completed tiles are kept")

    def state(self) -> ClusterState:
        now = time.monotonic()
        waiting = sum(1 for a in self.members if not a.live and now - a.since > GRACE)
        if now - self._looked > LOOK and (waiting or self._unresolved()):
            self._look(waiting)
            self._looked = now
        return ClusterState(
            self.resource, self.planned, sum(1 for a in self.members if a.live), waiting,
            self.given_up, self._free if waiting else None,
            tuple(f"{ip} (node {node[:8]})" for node, ip in self.dead.items()),
            len(self.lost), self.requeued)

    def _unresolved(self) -> bool:
        return any(a.node is not None and a.node not in self.dead for a in self.lost)

    def _look(self, waiting: int) -> None:
        """The cluster's free resources (while waiting), and which lost actors' nodes the
        cluster has declared dead."""
        try:
            if waiting:
                self._free = self.ray.available_resources().get(self.resource, 0)
            if self._unresolved():
                alive = {n["NodeID"]: n.get("Alive") for n in self.ray.nodes()}
                for actor in self.lost:
                    if actor.node is not None and not alive.get(actor.node, False):
                        self.dead[actor.node] = actor.ip
        except Exception:  # noqa: BLE001 - a look that fails is tried again later
            pass

    def _report(self) -> None:
        state = self.state()
        if state != self._shown:
            self._shown = state
            if self.watch is not None:
                self.watch(state)

    def close(self) -> None:
        self.inflight.clear()
        for actor in self.members:
            self._kill(actor)
        self.members = []
