"""``python -m agentkit``."""

import sys

from agentkit.cli import main

if __name__ == "__main__":
    sys.exit(main())
