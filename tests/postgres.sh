# Sourced by ../test.sh: starts a throwaway PostgreSQL server for the tests
# that run icemerge on a Postgres catalog, and exports its URI as
# ICEMERGE_TEST_POSTGRES_URI. The server lives in a temporary directory
# (data, unix socket, log), listens on 127.0.0.1 on a free port, and is
# stopped and removed when the sourcing shell exits.
#
# - ICEMERGE_TEST_POSTGRES_URI already set: that server is used as is
#   (each test creates and drops its own databases in it, so the role needs
#   CREATEDB); nothing is started.
# - No PostgreSQL server binaries: Debian's `postgresql` package is
#   installed with apt-get (needs root, as in CI).
# - Run as root: the server runs as the `postgres` user (PostgreSQL refuses
#   to run as root).

icemerge_pg_log() { echo "postgres for tests: $*" >&2; }

icemerge_pg_bindir() {
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
      echo "$dir"
      return 0
    fi
  done
  return 1
}

icemerge_pg_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

icemerge_pg_stop() {
  if [ -n "${ICEMERGE_PG_DIR:-}" ] && [ -d "$ICEMERGE_PG_DIR" ]; then
    $ICEMERGE_PG_AS "$ICEMERGE_PG_BIN/pg_ctl" -D "$ICEMERGE_PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$ICEMERGE_PG_DIR"
  fi
}

icemerge_pg_start() {
  if ! ICEMERGE_PG_BIN="$(icemerge_pg_bindir)"; then
    if [ "$(id -u)" != 0 ]; then
      icemerge_pg_log "no PostgreSQL server found in /usr/lib/postgresql/*/bin and not root: install Debian's 'postgresql' package or set ICEMERGE_TEST_POSTGRES_URI"
      return 1
    fi
    icemerge_pg_log "installing Debian's postgresql package..."
    # Debian's package would start its own cluster on port 5432; ours is separate.
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    ICEMERGE_PG_BIN="$(icemerge_pg_bindir)" || { icemerge_pg_log "postgresql installed but initdb not found"; return 1; }
  fi

  ICEMERGE_PG_DIR="$(mktemp -d /tmp/icemerge-pg.XXXXXX)"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown postgres "$ICEMERGE_PG_DIR"
    ICEMERGE_PG_AS="runuser -u postgres --"
  else
    ICEMERGE_PG_AS=""
  fi
  chmod 700 "$ICEMERGE_PG_DIR"
  trap icemerge_pg_stop EXIT

  local password port
  password="$(python3 -c 'import secrets; print(secrets.token_hex(12))')"
  echo "$password" > "$ICEMERGE_PG_DIR/pwfile"
  [ -z "$ICEMERGE_PG_AS" ] || chown postgres "$ICEMERGE_PG_DIR/pwfile"
  $ICEMERGE_PG_AS "$ICEMERGE_PG_BIN/initdb" -D "$ICEMERGE_PG_DIR/data" -U icemerge \
    --pwfile="$ICEMERGE_PG_DIR/pwfile" --auth-host=scram-sha-256 --auth-local=trust \
    -E UTF8 --no-sync >"$ICEMERGE_PG_DIR/initdb.log" 2>&1 \
    || { cat "$ICEMERGE_PG_DIR/initdb.log" >&2; return 1; }

  port="$(icemerge_pg_free_port)"
  if ! $ICEMERGE_PG_AS "$ICEMERGE_PG_BIN/pg_ctl" -D "$ICEMERGE_PG_DIR/data" -l "$ICEMERGE_PG_DIR/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $ICEMERGE_PG_DIR -c max_connections=300 -c fsync=off" start >/dev/null; then
    cat "$ICEMERGE_PG_DIR/server.log" >&2
    return 1
  fi
  $ICEMERGE_PG_AS "$ICEMERGE_PG_BIN/psql" -X -q -h "$ICEMERGE_PG_DIR" -p "$port" -U icemerge -d postgres \
    -c "CREATE DATABASE icemerge_test" >/dev/null
  export ICEMERGE_TEST_POSTGRES_URI="postgres://icemerge:$password@127.0.0.1:$port/icemerge_test"
  icemerge_pg_log "PostgreSQL $("$ICEMERGE_PG_BIN/pg_ctl" --version | awk '{print $3}') on 127.0.0.1:$port (data in $ICEMERGE_PG_DIR, removed at exit)"
}

if [ -n "${ICEMERGE_TEST_POSTGRES_URI:-}" ]; then
  icemerge_pg_log "using ICEMERGE_TEST_POSTGRES_URI from the environment"
else
  icemerge_pg_start
fi
