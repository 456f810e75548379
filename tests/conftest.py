from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(  # make fuzz: the decoders of tests/fuzz with a large budget
    "fuzz",
    parent=settings.get_profile("default"),
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "200000")),
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
