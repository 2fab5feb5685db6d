"""`python -m sparksim COMMAND ...`: see docs/sparksim.md."""

import sys

from sparksim.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
