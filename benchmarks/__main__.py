"""``python -m benchmarks``: see ``benchmarks/README.md``."""

import sys

from benchmarks.harness import main

sys.exit(main())
