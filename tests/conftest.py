"""Shared pytest set-up: a hypothesis profile that keeps property tests stable on busy machines.

Tests set ``max_examples`` and ``deadline`` themselves; the profile adds what they leave out:
no health check fails a test because a shared 2-core machine generated data slowly, and under
CI (``CI`` set) examples are derandomised so a run is reproducible from its log.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "omny",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=bool(os.environ.get("CI")),
    print_blob=True,
)
settings.load_profile("omny")
