"""One proposer class per drafting method (`eagle.py`, `eagle3.py`), on the shared base in `base.py`."""
