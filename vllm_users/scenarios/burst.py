"""The burst scenario: a LoadTestShape of user-driven bursts (quiet, spike, recover) over chat requests.

The shape reads its own options (--burst-quiet-users, --burst-spike-users, --burst-quiet, --burst-spike,
--burst-recover, --burst-cycles; env VLLM_LOCUST_BURST_*); the spike defaults to --users. For open-loop
bursts use gamma arrivals instead: --request-rate R --burstiness 0.5 (vllm_users.workload.arrivals).
"""

from __future__ import annotations

from dataclasses import dataclass

from locust import LoadTestShape

from vllm_users.scenarios.chat import ChatUser
from vllm_users.scenarios.options import BurstOptions

SPAWN_RATE = 1000.0  # users per second: a spike arrives at once


@dataclass(slots=True)
class BurstPlan:
    """quiet/spike/recover users and seconds, repeated `cycles` times."""

    quiet_users: int
    spike_users: int
    quiet_s: float
    spike_s: float
    recover_s: float
    cycles: int = 1

    @property
    def cycle_s(self) -> float:
        """Seconds of one quiet + spike + recover cycle."""
        return self.quiet_s + self.spike_s + self.recover_s

    @property
    def total_s(self) -> float:
        """Seconds of the whole shape."""
        return self.cycle_s * self.cycles

    def users_at(self, t: float) -> int | None:
        """Users wanted `t` seconds into the test; None once every cycle is over."""
        if t >= self.total_s:
            return None
        t %= self.cycle_s
        if self.quiet_s <= t < self.quiet_s + self.spike_s:
            return self.spike_users
        return self.quiet_users

    def phase_at(self, t: float) -> str:
        """quiet, spike or recover at `t` seconds (done after the last cycle)."""
        if t >= self.total_s:
            return "done"
        t %= self.cycle_s
        return "quiet" if t < self.quiet_s else "spike" if t < self.quiet_s + self.spike_s else "recover"


def plan_from_options(o: BurstOptions, users: int | None) -> BurstPlan:
    """The plan from the burst options (a Locust process's or `vllm-locust run`'s); the spike defaults to
    `users` (--users), else 8."""
    spike = o.burst_spike_users or users or 8
    quiet = o.burst_quiet_users or max(1, spike // 8)
    return BurstPlan(quiet, spike, o.burst_quiet, o.burst_spike, o.burst_recover, o.burst_cycles)


class BurstShape(LoadTestShape):
    """Quiet, spike, recover (repeated --burst-cycles times), then the test ends."""

    plan: BurstPlan | None = None
    use_common_options = True  # the spike defaults to --users

    def tick(self) -> tuple[int, float] | None:
        """Users for now; None ends the test."""
        if self.plan is None:
            from vllm_users.distributed.env_state import locust_option, options

            assert self.runner is not None
            env = self.runner.environment
            self.plan = plan_from_options(options(env).burst, locust_option(env, "num_users"))
        users = self.plan.users_at(self.get_run_time())
        return None if users is None else (users, SPAWN_RATE)


class BurstUser(ChatUser):
    """Chat requests, recorded under the scenario name `burst`."""

    scenario = "burst"
