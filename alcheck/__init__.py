"""alcheck: measure EAGLE speculative-decoding acceptance length (AL) and judge it."""

__version__ = "0.1.0"
