"""Analysis: run records → summaries, statistics, tables, claims, report; plotting on top."""
