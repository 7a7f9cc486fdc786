"""How often a rank replicates its state: every K iterations (`Resilient(every=K)`), or K chosen
from what a replica costs (`every="auto"`).

A replica blocks the loop for its clone into host memory (and for the previous push, when that is
still in flight): C seconds. At K the loop pays C / (K t) of its time (t: one iteration), and a
fault loses K / 2 iterations on average. With `every="auto"` K is the smallest that keeps the
loop's cost within `budget` (5 % by default): K >= C / (budget t); given the job's mean time
between failures M (`mtbf_s`), Young's interval (Young, 1974: the interval sqrt(2 C M) minimizes
the replicas' cost plus the work lost to faults) raises it: K = max(that, sqrt(2 C M) / t).

Every rank must replicate at the same iterations: the resume point is the newest iteration every
rank (or its replica) has. So K is agreed, not chosen per rank: FIRST_AGREE iterations into a
generation, then every AGREE_EVERY, each rank says the K it wants and all take the largest (one
all-reduce of one integer, `Resilient.step`); each generation starts at K = 1 from its first
iteration, on every rank alike. The job's first generation measures the cost in its first
FIRST_AGREE replicas; a later one agrees at its first iteration too, where the survivors'
measurements carry over (a standby that took a rank has none and asks for 1: the largest wins), so
a fault costs one replica at K = 1, not FIRST_AGREE (1.8 s more of blocking at 64 MB here).

An iteration's time t is measured without the replica's own blocking (at K = 1 a dear replica would
otherwise pass for the loop's work, and K would come out too small).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FIRST_AGREE = 4  # iterations into a generation: the first agreement on K
AGREE_EVERY = 32  # iterations between the later ones (one 8-byte all-reduce each)
K_MAX = 100_000
SMOOTHING = 0.2  # weight of the newest measurement in the running means


@dataclass
class Cadence:
    every: int | None  # a fixed K; None: agreed from the cost
    budget: float = 0.05
    mtbf_s: float | None = None
    k: int = 1
    base: int = -1  # replicate at iterations base + n K
    gen_start: int = -1
    first_agree: int = FIRST_AGREE  # the generation's first agreement, iterations in
    cost_s: float | None = None  # running mean of one replica's blocking
    iteration_s: float | None = None  # running mean of one iteration (step to step)
    _last_step: float | None = None
    _blocked: float = 0.0  # replica blocking since the last step (taken out of the iteration's time)

    def __post_init__(self):
        if self.every is not None:
            self.k = self.every

    @property
    def auto(self) -> bool:
        return self.every is None

    def restart(self, start: int, gen: int = 0) -> None:
        """Generation `gen` starts at iteration `start` (its replica of start - 1 taken on entry)."""
        self._last_step, self._blocked = None, 0.0
        if self.auto:
            self.k, self.base, self.gen_start = 1, start - 1, start - 1
            self.first_agree = FIRST_AGREE if gen == 0 else 1

    def due(self, iteration: int) -> bool:
        return (iteration - self.base) % self.k == 0

    def observe_step(self, now: float) -> None:
        if self._last_step is not None:
            self.iteration_s = _mean(self.iteration_s, max(1e-6, now - self._last_step - self._blocked))
        self._last_step, self._blocked = now, 0.0

    def observe_replica(self, seconds: float) -> None:
        self.cost_s = _mean(self.cost_s, seconds)
        self._blocked += seconds

    def agreement_due(self, iteration: int) -> bool:
        n = iteration - self.gen_start
        return self.auto and (n in (self.first_agree, FIRST_AGREE) or
                              (n > FIRST_AGREE and (n - FIRST_AGREE) % AGREE_EVERY == 0))

    def wanted(self) -> int:
        """The K this rank's measurements ask for."""
        if not self.auto:
            return self.k
        if not self.cost_s or not self.iteration_s:
            return self.k
        # the loop's share C / (K t + C) within the budget b: K >= C (1 - b) / (b t)
        k = math.ceil(self.cost_s * (1.0 - self.budget) / (self.budget * self.iteration_s) - 1e-9)
        if self.mtbf_s:
            k = max(k, round(math.sqrt(2.0 * self.cost_s * self.mtbf_s) / self.iteration_s))
        return max(1, min(K_MAX, k))

    def adopt(self, k: int, iteration: int) -> None:
        """The agreed K, from this iteration (where every rank replicates: `due` is true here)."""
        k = max(1, min(K_MAX, int(k)))
        if k != self.k:
            self.k, self.base = k, iteration

    def to_dict(self) -> dict:
        return {"every": self.every if self.every is not None else "auto", "k": self.k,
                "replica_s": None if self.cost_s is None else round(self.cost_s, 6),
                "iteration_s": None if self.iteration_s is None else round(self.iteration_s, 6)}


def _mean(old: float | None, new: float) -> float:
    return new if old is None else (1.0 - SMOOTHING) * old + SMOOTHING * new
