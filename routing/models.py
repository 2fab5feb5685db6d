"""Router and gateway models (DESIGN.md §5, §8, §9)."""
