"""Upper bounds on what a spec may declare (C029, C037), so that no stage after the checker can fail
on a size: the planner builds per-pair and per-column tables, generated C computes element counts
in int64, and operator names become file names.
"""
from __future__ import annotations

# head_dim bounds everything the planner materializes per pair or per column (rotary_dim, the
# frequency table, freq_factors, the pair blocks, a table's width). 65536 is 64x the widest head of
# any model we know and plans in about a second.
MAX_HEAD_DIM = 65536
MAX_TABLE_WIDTH = MAX_HEAD_DIM

# The fixed extents of one tensor multiply to at most 2^52 elements: times 8 bytes per element and
# the symbols bound at run time there is still headroom below int64 for the element count and byte
# size that the generated C computes (symbols are checked against the rest when the operator runs).
MAX_FIXED_ELEMENTS = 2 ** 52

# Operator names become file names (NAME.py, NAME.c, NAME.h, NAME.cu, and in the build cache
# .NAME-<24 hex>.so.sha256-XXXXXXXX.tmp); tensor names become C identifiers with suffixes.
# 128 leaves that longest derived name well under the usual 255-byte file-name limit.
MAX_NAME = 128


def name_too_long(name: str) -> str | None:
    """A C037 message for a name over MAX_NAME characters, else None."""
    if len(name) <= MAX_NAME:
        return None
    return f"this name is {len(name)} characters long; names have at most {MAX_NAME}"
