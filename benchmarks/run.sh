#!/usr/bin/env bash
# The one command: builds benchmarks/.venv-peers when missing or stale (setup.sh), then measures
# every contender and writes benchmarks/results/<date>.{json,md} and latest.{json,md}.
# Arguments go to `python -m benchmarks` (e.g. --repeats 3, --contenders core).
set -euo pipefail
cd "$(dirname "$0")/.."
bash benchmarks/setup.sh
exec benchmarks/.venv-peers/bin/python -m benchmarks "$@"
