"""A run directory: claimed folder, run.json / questions.csv / traces.csv / answers.jsonl, resume checks."""
