"""The simulated device the adaptive controller's tests drive it on (``test_adaptive.py``,
``test_adaptive_convergence.py``): a brute-force chain walk and a cost model.

``_CostModel`` is also those tests' oracle: its expected throughput per depth (the closed
form's accept length over the iteration's steady-state time) and its best depth, the
brute-force argmax over the candidates.
"""

from __future__ import annotations

import random

from eagle_hal.speculative.adaptive import AdaptiveController
from eagle_hal.speculative.chain_acceptance import expected_accept_length


def _simulated_chain_accept(alpha: float, steps: int, rng: random.Random) -> int:
    """Brute force: walk a chain, accepting each draft with probability alpha, plus bonus."""
    accepted = 0
    while accepted < steps and rng.random() < alpha:
        accepted += 1
    return accepted + 1


class _CostModel:
    """A simulated device: one iteration at depth S costs ``verify + S * draft_step`` (plus
    the draft extend when S > 0, plus the catch-up of the tokens emitted at S = 0 since the
    draft last ran), times uniform noise; the accept length is the mean of ``batch`` chain
    walks with per-token acceptance ``alpha``."""

    def __init__(self, batch: int, alpha: float, verify: float, draft_step: float,
                 extend: float = 0.0, catch_up_per_token: float = 0.0, noise: float = 0.05,
                 seed: int = 7) -> None:
        self.batch, self.alpha, self.verify, self.draft_step = batch, alpha, verify, draft_step
        self.extend, self.catch_up_per_token, self.noise = extend, catch_up_per_token, noise
        self.rng = random.Random(seed)
        self.idle = 0

    def expected_seconds(self, steps: int) -> float:
        """Seconds of one iteration at ``steps`` in steady state (no catch-up, no noise)."""
        extend = self.extend if steps > 0 else 0.0
        return self.verify + steps * self.draft_step + extend

    def expected_throughput(self, steps: int) -> float:
        """Tokens per request per second at ``steps``, in steady state (the oracle)."""
        return expected_accept_length(self.alpha, steps) / self.expected_seconds(steps)

    def best(self, candidates: tuple[int, ...]) -> int:
        return max(candidates, key=self.expected_throughput)

    def iterate(self, steps: int) -> tuple[float, float, float]:
        """(mean accept length, seconds, of which the catch-up) of one iteration."""
        seconds, catch_up = self.verify + steps * self.draft_step, 0.0
        if steps > 0:
            catch_up, self.idle = self.idle * self.catch_up_per_token, 0
            seconds += self.extend
        else:
            self.idle += 1
        seconds *= 1 + self.noise * (2 * self.rng.random() - 1)
        seconds += catch_up
        walks = [_simulated_chain_accept(self.alpha, steps, self.rng) for _ in range(self.batch)]
        return sum(walks) / self.batch, seconds, catch_up


def _drive(controller: AdaptiveController, model: _CostModel, batch: int, iters: int) -> list[int]:
    """Run ``iters`` iterations; return the depth settled on after each."""
    settled = []
    for _ in range(iters):
        steps = controller.choose(batch)
        controller.observe(batch, steps, *model.iterate(steps))
        settled.append(controller.settled(batch))
    return settled


CANDIDATES = (0, 1, 3, 5)
