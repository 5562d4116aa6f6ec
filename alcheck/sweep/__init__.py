"""The K x repeat sweep: the driver, one cell, its events and where the pair is placed."""
