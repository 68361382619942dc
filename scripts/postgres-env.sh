#!/usr/bin/env bash
# A private PostgreSQL server for the tests: installs Debian's postgresql if it is
# missing (idempotent), then starts a throw-away cluster in DIR (created; default a new
# temporary folder) on a free loopback port, and prints its URL on stdout:
#   postgres://flare@127.0.0.1:PORT/postgres
# Stop it with: scripts/postgres-env.sh --stop DIR
# PostgreSQL refuses to run as root: as root, the cluster belongs to the `postgres` user
# that the Debian package creates.
set -euo pipefail

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

bindir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return; }
  done
  return 1
}

if [ "${1:-}" = --stop ]; then
  dir=$2
  bin=$(bindir)
  [ -f "$dir/data/postmaster.pid" ] && as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
  rm -rf "$dir"
  exit 0
fi

if ! bindir >/dev/null; then
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
bin=$(bindir)
dir=${1:-$(mktemp -d /tmp/flare-pg.XXXXXX)}
mkdir -p "$dir"
[ "$(id -u)" = 0 ] && chown postgres "$dir"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_owner "$bin/initdb" -D "$dir/data" -U flare -A trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 \
  || { cat "$dir/initdb.log" >&2; exit 1; }
# Durability off: a test cluster; the unix socket in DIR, not in /var/run.
as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
  start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
echo "postgres://flare@127.0.0.1:$port/postgres"
