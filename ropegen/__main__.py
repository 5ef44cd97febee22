"""`python -m ropegen` runs the command line."""
import sys

from ropegen.cli import main

sys.exit(main())
