"""Command line: `python -m pyooc {plan,bench,info,demo}` (pyooc/cli/)."""

import sys

from pyooc.cli import main

if __name__ == "__main__":
    sys.exit(main())
