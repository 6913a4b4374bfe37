"""Running a matrix: the runner, planning, per-cell accounting and progress."""
