"""Running a benchmark job: the host-side runner, the harness inside the platform, edge hosts, cleanup."""
