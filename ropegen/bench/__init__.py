"""ropegen bench: timing harness, copy yardstick, report and peers."""
