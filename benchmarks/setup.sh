#!/usr/bin/env bash
# Creates benchmarks/.venv-peers: this project (editable) plus the pinned peer frameworks.
# Re-running it is cheap: it reinstalls only when requirements-peers.txt or pyproject.toml changed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
venv="$here/.venv-peers"
python="${PYTHON:-python3}"
stamp="$venv/.requirements.sha256"
want="$(cat "$here/requirements-peers.txt" "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -e "$root[instructor]" -r "$here/requirements-peers.txt"
echo "$want" >"$stamp"
