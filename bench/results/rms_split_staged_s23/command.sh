#!/bin/sh
# Usage: sh command.sh OLD_TREE NEW_TREE ROUNDS  (each tree a checkout of ropegen)
# RMSNorm [4096, 4096] bf16, TH threads (default 1), before (OLD) / after (NEW): the harness of
# ../rms_in_place_s23 with its split cases (x, y on a line; x off and y on one; both off; in place off).
CASES=split DTYPES=bf16 exec sh "$(dirname "$0")/../rms_in_place_s23/command.sh" "$@"
