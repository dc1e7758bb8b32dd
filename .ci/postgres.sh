#!/usr/bin/env bash
# A throw-away PostgreSQL server on loopback for the journal tests.
#
#   eval "$(.ci/postgres.sh start)"   # installs Debian's postgresql if missing, starts a fresh
#                                     # cluster, exports AGENTKIT_TEST_POSTGRES_DSN (and _DATA)
#   .ci/postgres.sh stop              # stops it and deletes its data directory
#
# Only the export lines go to stdout; progress goes to stderr. The cluster trusts local
# connections and runs without fsync: it holds test data only.
set -euo pipefail

log() { echo "postgres.sh: $*" >&2; }

pg_bindir() {
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$dir" ] && [ -x "$dir/initdb" ] && echo "$dir"
}

as_owner() {
    # initdb and the server refuse to run as root; run them as the postgres account then.
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
    python3 - <<'PY'
import socket
def free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
if free(5432):
    print(5432)
else:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])
PY
}

start() {
    local bin
    bin=$(pg_bindir || true)
    if [ -z "$bin" ]; then
        log "installing postgresql (apt-get)"
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
        bin=$(pg_bindir)
    fi
    local data port
    data=$(mktemp -d /tmp/agentkit-pg.XXXXXX)
    [ "$(id -u)" = 0 ] && chown postgres: "$data"
    port=$(free_port)
    as_owner "$bin/initdb" -D "$data/cluster" -U postgres -A trust -E UTF8 --no-sync >"$data/initdb.log" 2>&1 \
        || { cat "$data/initdb.log" >&2; exit 1; }
    as_owner "$bin/pg_ctl" -D "$data/cluster" -l "$data/server.log" -w -t 60 \
        -o "-h 127.0.0.1 -p $port -k $data -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
        start >&2 || { cat "$data/server.log" >&2; exit 1; }
    as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres agentkit_test
    log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port, data in $data"
    echo "export AGENTKIT_TEST_POSTGRES_DSN=postgresql://postgres@127.0.0.1:$port/agentkit_test"
    echo "export AGENTKIT_TEST_POSTGRES_DATA=$data"
}

stop() {
    local data=${1:-${AGENTKIT_TEST_POSTGRES_DATA:-}}
    if [ -z "$data" ] || [ ! -d "$data/cluster" ]; then
        log "nothing to stop (pass the data directory or set AGENTKIT_TEST_POSTGRES_DATA)"
        return 0
    fi
    local bin
    bin=$(pg_bindir)
    as_owner "$bin/pg_ctl" -D "$data/cluster" -m fast -w stop >&2 || true
    rm -rf "$data"
    log "stopped and removed $data"
}

case "${1:-start}" in
    start) start ;;
    stop) stop "${2:-}" ;;
    *) log "usage: $0 start | stop [DATA_DIR]"; exit 2 ;;
esac
