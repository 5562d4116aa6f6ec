"""Published reference AL tables and their verdicts."""
