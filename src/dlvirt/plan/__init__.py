"""Planning: config → scenarios → jobs, and the left-out entries with their reasons."""
