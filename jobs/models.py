"""Jobs and their log lines (DESIGN.md §5, §7)."""
