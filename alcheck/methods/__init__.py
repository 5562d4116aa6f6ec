"""Drafting methods: one entry per kind of draft head (`table.py`), each owning its detection,
config check, weight size, loader and proposer (`eagle.py`, `eagle3.py`), plus the one pair
planner and loader every consumer uses (`pair.py`)."""
