"""User-driven bursts (quiet, spike, recover): `locust -f locustfiles/burst.py --host http://127.0.0.1:8000 -u 64`.

--burst-spike-users (default -u), --burst-quiet-users, --burst-quiet/--burst-spike/--burst-recover seconds,
--burst-cycles; env VLLM_LOCUST_BURST_*. The test ends when the shape does.
"""

from vllm_users.scenarios.burst import BurstShape, BurstUser

__all__ = ["BurstUser", "BurstShape"]
