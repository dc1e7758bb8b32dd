"""``python -m benchmarks.injection``: see ``benchmarks/README.md``."""

import sys

from benchmarks.injection.run import main

sys.exit(main())
