"""The KL coefficient of PPO's reward penalty: fixed, or adapted toward a target KL.

Adaptive control is Ziegler et al. 2019 (§2.2): after each batch, the coefficient moves by
e·n/horizon, where e is the KL's relative error against the target clipped to ±0.2 and n the
rollouts in the batch. Its whole state is one number, saved in checkpoints so a resumed run
continues with the coefficient the straight run had.
"""

from __future__ import annotations


class KlController:
    def __init__(self, kl_coef: float, target: float | None = None, horizon: int = 10000) -> None:
        self.value, self.target, self.horizon = float(kl_coef), target, horizon

    def update(self, current_kl: float, rollouts: int) -> None:
        """Move the coefficient after a batch of `rollouts` whose mean KL was `current_kl` (no-op when fixed)."""
        if self.target is None:
            return
        error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * rollouts / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])
