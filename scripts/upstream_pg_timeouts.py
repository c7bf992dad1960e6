"""pytest plugin for scripts/upstream_pg_tests.sh: stretches upstream's spawn deadlines.

Upstream Mooncake's collectives tests (mooncake-pg/tests) give each spawned group a fixed
wall-clock limit (30 s by default) that covers starting the processes: on a loaded host
four interpreters importing torch take most of it, and a test then fails on load, not on
the backend. With UPSTREAM_TIMEOUT_SCALE set to a factor above 1, every limit that their
pg_test_utils.wait_for_spawn_context enforces is multiplied by it; the test files stay
as they are. Unset or 1 leaves upstream's limits untouched.
"""

import os


def pytest_configure(config):
    scale = float(os.environ.get("UPSTREAM_TIMEOUT_SCALE", "1") or "1")
    if scale == 1:
        return
    if scale < 1:
        raise ValueError(f"UPSTREAM_TIMEOUT_SCALE must be at least 1, got {scale}")
    import pg_test_utils

    enforce = pg_test_utils.wait_for_spawn_context

    def stretched(ctx, timeout_s, *args, **kwargs):
        return enforce(ctx, timeout_s * scale, *args, **kwargs)

    pg_test_utils.wait_for_spawn_context = stretched
