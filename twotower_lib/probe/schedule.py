"""The probing heads' learning rate and when they stop (`ProbeConfig.schedule`): a warm-up, then either a
linear decay over `max_epochs` or a constant rate that drops on plateaus of the held-out loss and ends in an
averaged cool-down."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from twotower_lib.probe.config import ProbeConfig


def linear_rate(total_steps: int, warmup_fraction: float):
    """The `linear` schedule's rate as a fraction of the peak: warm-up over `warmup_fraction` of the steps, then
    linear decay to 0."""
    warmup = max(1, int(total_steps * warmup_fraction))

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))
    return f


class HeadSchedule:
    """The heads' learning rate and when they stop. `linear`: warm-up and linear decay over max_epochs.
    `plateau`: warm-up, then constant; a plateau (no head's held-out loss improving by `tol`) lowers the
    rate (`lr_drops` times), then starts a linear cool-down to 0 over `cooldown_epochs` whose iterates
    are averaged (`cooldown_average`), after which the heads stop."""

    def __init__(self, cfg: ProbeConfig, steps_per_epoch: int, params: list[torch.Tensor]):
        self.cfg, self.steps_per_epoch, self.params = cfg, steps_per_epoch, params
        if cfg.schedule == "linear":
            self.rate = linear_rate(steps_per_epoch * cfg.max_epochs, cfg.warmup_fraction)
        else:
            warmup = max(1, int(steps_per_epoch * cfg.warmup_fraction))
            self.rate = lambda step: min(1.0, (step + 1) / warmup)  # noqa: E731  (then constant; drops on plateaus)
        self.scale, self.drops_left = 1.0, cfg.lr_drops
        self.cooldown: tuple[int, int] | None = None  # (first step, steps) once the rate is falling to 0
        self.average: list[torch.Tensor] | None = None
        self.average_steps = 0
        self.step = 0

    def lr(self, step: int) -> float:
        lr = self.cfg.peak_lr * self.scale * self.rate(step)
        return lr if self.cooldown is None else lr * max(0.0, 1 - (step - self.cooldown[0]) / self.cooldown[1])

    def after_step(self) -> None:
        """Count an optimizer step; during the cool-down, fold the new iterate into the uniform average."""
        self.step += 1
        if self.average is not None:
            self.average_steps += 1
            with torch.no_grad():
                torch._foreach_lerp_(self.average, self.params, 1 / self.average_steps)

    def end_of_epoch(self) -> None:
        """Once the cool-down is over, the heads take the average of its iterates."""
        if self.average is not None and self.step >= sum(self.cooldown):
            with torch.no_grad():
                torch._foreach_copy_(self.params, self.average)

    def after_epoch(self, gain: float) -> bool:
        """React to an epoch's best held-out gain (plateau schedule); True when the heads have converged."""
        cfg = self.cfg
        if self.cooldown is not None and self.step >= sum(self.cooldown):    # the rate has reached 0
            return True
        if self.cooldown is None and gain < cfg.tol:                          # a plateau
            if self.drops_left:
                self.drops_left, self.scale = self.drops_left - 1, self.scale * cfg.lr_drop
            elif cfg.cooldown_epochs:
                self.cooldown = (self.step, self.steps_per_epoch * cfg.cooldown_epochs)
                if cfg.cooldown_average:
                    self.average, self.average_steps = [p.detach().clone() for p in self.params], 0
            else:
                return True
        return False
