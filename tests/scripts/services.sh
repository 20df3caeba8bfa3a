#!/usr/bin/env bash
# Local services for tests, the demo and the benchmark: a throwaway PostgreSQL cluster and
# the AWS stand-in (moto's server, run by tests/scripts/stand_in.py, which adds what moto
# lacks: SES v2 GetAccount, answering a generous SendQuota that STAND_IN_SES_MAX_SEND_RATE,
# STAND_IN_SES_MAX_24_HOUR_SEND and STAND_IN_SES_SENT_LAST_24_HOURS override; everything
# else is moto's). Source this file, then call the functions:
#
#   pg_up          start a cluster unless DATABASE_URL is set; exports DATABASE_URL
#   pg_down        stop the cluster pg_up started (nothing if it used DATABASE_URL)
#   stand_in_up    start the stand-in unless AWS_ENDPOINT_URL is set; exports the AWS_* vars
#   stand_in_down  stop the server stand_in_up started
#   pgbouncer_up   start a PgBouncer (transaction pooling) in front of DATABASE_URL's server;
#                  exports TEST_POOLER_URL
#   pgbouncer_down stop it
#   ingest_watch_up / ingest_watch_down
#                  serve the ingest function under `cargo lambda watch` on a database of its own
#
# State lives under $NOTIF_STATE (default .local/ in the checkout), so `make db/up` in one
# shell and `make db/down` in another find the same cluster.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NOTIF_STATE=${NOTIF_STATE:-$ROOT/.local}
MOTO_VERSION=${MOTO_VERSION:-5.2.5}

log() { printf '%s\n' "$*" >&2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

pg_bindir() {
  local d
  for d in ${PG_BINDIR:-} "$(pg_config --bindir 2>/dev/null)" /usr/lib/postgresql/*/bin \
           /usr/local/opt/postgresql@*/bin /opt/homebrew/opt/postgresql@*/bin; do
    if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
  done
  return 1
}

# Runs a command as the cluster's owner: `postgres` when we are root (initdb refuses root).
as_pg_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# db_where CONNSTRING [--has-password]: where a connection string (a postgres:// URL or the
# key=value form) points, as host:port/dbname, never its user or password. With
# --has-password: prints nothing, succeeds when the string holds a password. (The string goes
# to python in the environment, not on a command line that ps shows.)
db_where() {
  DB_WHERE_INPUT=$1 python3 - "${@:2}" <<'PY'
import os, re, sys, urllib.parse as u
s = os.environ["DB_WHERE_INPUT"].strip()
kv = {}
if re.match(r"postgres(ql)?://", s):
    main, _, query = s.split("://", 1)[1].partition("?")
    netloc, _, path = main.partition("/")
    userinfo, _, hosts = netloc.rpartition("@")
    if ":" in userinfo:
        kv["password"] = userinfo.split(":", 1)[1]
    m = re.fullmatch(r"(\[[^]]*\]|[^:]*)(?::(\d*))?", hosts.split(",")[0])
    kv.update(host=u.unquote(m.group(1)) if m else "", port=(m.group(2) if m else "") or "",
              dbname=u.unquote(path))
    kv.update(u.parse_qsl(query))
else:
    for k, v in re.findall(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", s):
        kv[k] = v[1:-1] if v.startswith("'") else v
if sys.argv[1:] == ["--has-password"]:
    sys.exit(0 if kv.get("password") else 1)
host = kv.get("host") or kv.get("hostaddr") or "localhost"
print("%s:%s/%s" % (host, kv.get("port") or "5432", kv.get("dbname") or "(default)"))
PY
}

pg_up() {
  if [ -n "${DATABASE_URL:-}" ]; then
    log "postgres: using DATABASE_URL ($(db_where "$DATABASE_URL"))"
    return 0
  fi
  local bindir
  if ! bindir=$(pg_bindir); then
    log "postgres: server binaries (initdb, pg_ctl) not found."
    log "  Debian/Ubuntu: sudo apt-get install postgresql   (or set PG_BINDIR)"
    log "  macOS:         brew install postgresql@15"
    log "  or point DATABASE_URL at a server you already run."
    return 1
  fi
  if [ -f "$NOTIF_STATE/pg.env" ]; then
    # shellcheck disable=SC1091
    . "$NOTIF_STATE/pg.env"
    if "$bindir/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; then
      export DATABASE_URL
      log "postgres: already running on port $PG_PORT"
      return 0
    fi
    rm -f "$NOTIF_STATE/pg.env"
  fi
  mkdir -p "$NOTIF_STATE"
  local dir port
  dir=$(mktemp -d "${TMPDIR:-/tmp}/notif-pg.XXXXXX")
  port=$(free_port)
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    chown postgres "$dir"
  fi
  as_pg_owner "$bindir/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
    || { log "postgres: initdb failed:"; cat "$dir/initdb.log" >&2; return 1; }
  # the admin role connects without a password; every other role needs its password
  # (so a wrong password is refused, as on a real server)
  as_pg_owner sh -c "printf 'host all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n' | cat - '$dir/data/pg_hba.conf' > '$dir/data/pg_hba.new' && mv '$dir/data/pg_hba.new' '$dir/data/pg_hba.conf'"
  # fsync off: a throwaway cluster for tests (the benchmark starts its own, durable one)
  as_pg_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=400 ${PG_EXTRA_OPTS:--c fsync=off -c full_page_writes=off}" >/dev/null \
    || { log "postgres: failed to start:"; cat "$dir/server.log" >&2; return 1; }
  DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  export DATABASE_URL
  printf 'PG_DIR=%q\nPG_PORT=%q\nPG_BINDIR_USED=%q\nDATABASE_URL=%q\n' "$dir" "$port" "$bindir" "$DATABASE_URL" >"$NOTIF_STATE/pg.env"
  log "postgres: started on 127.0.0.1:$port (data in $dir)"
}

pg_down() {
  [ -f "$NOTIF_STATE/pg.env" ] || return 0
  # shellcheck disable=SC1091
  . "$NOTIF_STATE/pg.env"
  as_pg_owner "$PG_BINDIR_USED/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  # the server's log outlives the cluster, to read after a run (the bench's logs checkpoints
  # and autovacuum runs)
  cp "$PG_DIR/server.log" "$NOTIF_STATE/server.log" 2>/dev/null || true
  rm -rf "$PG_DIR" "$NOTIF_STATE/pg.env"
  log "postgres: stopped"
}

stand_in_install() {
  local venv="$ROOT/.venv"
  if [ ! -x "$venv/bin/moto_server" ]; then
    log "stand-in: installing moto[server]==$MOTO_VERSION into $venv"
    python3 -m venv "$venv" || { log "stand-in: python3 -m venv failed (Debian: apt-get install python3-venv)"; return 1; }
    "$venv/bin/pip" install -q --disable-pip-version-check "moto[server]==$MOTO_VERSION" \
      || { log "stand-in: pip install moto[server] failed"; return 1; }
  fi
}

stand_in_env() {
  export AWS_ENDPOINT_URL="http://127.0.0.1:$1"
  export AWS_REGION=${AWS_REGION:-us-east-1}
  export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-testing}
  export AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-testing}
}

stand_in_up() {
  if [ -n "${AWS_ENDPOINT_URL:-}" ]; then
    log "stand-in: using AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL"
    return 0
  fi
  if [ -f "$NOTIF_STATE/moto.env" ]; then
    # shellcheck disable=SC1091
    . "$NOTIF_STATE/moto.env"
    if curl -fsS -o /dev/null "http://127.0.0.1:$MOTO_PORT/moto-api/data.json"; then
      stand_in_env "$MOTO_PORT"
      log "stand-in: already running on port $MOTO_PORT"
      curl -fsS -o /dev/null "http://127.0.0.1:$MOTO_PORT/v2/email/account" 2>/dev/null \
        || log "stand-in: it predates stand_in.py (no SES GetAccount): stand_in_down, then stand_in_up, to restart it"
      return 0
    fi
    rm -f "$NOTIF_STATE/moto.env"
  fi
  stand_in_install || return 1
  mkdir -p "$NOTIF_STATE"
  local port pid i
  port=$(free_port)
  setsid "$ROOT/.venv/bin/python" "$ROOT/tests/scripts/stand_in.py" -H 127.0.0.1 -p "$port" >"$NOTIF_STATE/moto.log" 2>&1 < /dev/null &
  pid=$!
  for i in $(seq 1 100); do
    if curl -fs -o /dev/null "http://127.0.0.1:$port/moto-api/data.json"; then break; fi
    if ! kill -0 "$pid" 2>/dev/null; then log "stand-in: stand_in.py exited:"; cat "$NOTIF_STATE/moto.log" >&2; return 1; fi
    sleep 0.2
  done
  printf 'MOTO_PORT=%q\nMOTO_PID=%q\n' "$port" "$pid" >"$NOTIF_STATE/moto.env"
  stand_in_env "$port"
  log "stand-in: moto (stand_in.py) on 127.0.0.1:$port"
}

stand_in_down() {
  [ -f "$NOTIF_STATE/moto.env" ] || return 0
  # shellcheck disable=SC1091
  . "$NOTIF_STATE/moto.env"
  kill "$MOTO_PID" 2>/dev/null || true
  rm -f "$NOTIF_STATE/moto.env"
  log "stand-in: stopped"
}

# stand_in_verify_sender ADDRESS: makes ADDRESS's domain a verified SES identity in the local
# stand-in (SES sends only from a verified identity, and so does moto): the moto stand_in_up
# started, or one AWS_ENDPOINT_URL names that answers moto's own API (its container from
# compose.yaml, say). Does nothing against any other endpoint: never touches a real AWS account.
stand_in_verify_sender() {
  local endpoint
  if [ -f "$NOTIF_STATE/moto.env" ]; then
    endpoint=${AWS_ENDPOINT_URL:-}
  elif [ -n "${AWS_ENDPOINT_URL:-}" ] \
    && curl -fsS -o /dev/null --max-time 5 "${AWS_ENDPOINT_URL%/}/moto-api/data.json" 2>/dev/null; then
    endpoint=$AWS_ENDPOINT_URL
    log "stand-in: $AWS_ENDPOINT_URL answers as moto: verifying the SES sender there"
  else
    return 0
  fi
  stand_in_install || return 1
  AWS_ENDPOINT_URL=$endpoint "$ROOT/.venv/bin/python" - "$1" <<'PY' || { log "stand-in: could not verify the SES sender $1"; return 1; }
import os, sys, boto3
# moto accepts any credentials; a shell without them still gets its verified sender
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
ses = boto3.client("sesv2", region_name=os.environ.get("AWS_REGION", "us-east-1"))
domain = sys.argv[1].rpartition("@")[2].rstrip(">").strip()
known = {i["IdentityName"] for i in ses.list_email_identities()["EmailIdentities"]}
if domain not in known:
    ses.create_email_identity(EmailIdentity=domain)
PY
}

# pgbouncer_up: a PgBouncer in transaction pooling mode in front of DATABASE_URL's server,
# with a server pool smaller than the number of clients the tests open (PGBOUNCER_POOL_SIZE,
# default 3 per database). Exports TEST_POOLER_URL. Debian's package is 1.18: no
# max_prepared_statements, so a named prepared statement breaks through it, as it should.
pgbouncer_up() {
  local bin
  bin=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null) || {
    log "pgbouncer: not found (Debian/Ubuntu: apt-get install pgbouncer)"
    return 1
  }
  local target host port dir pport
  target=$(python3 -c 'import sys, urllib.parse as u; p = u.urlparse(sys.argv[1]); print(p.hostname or "127.0.0.1", p.port or 5432)' "$DATABASE_URL") \
    || { log "pgbouncer: DATABASE_URL must be a postgres:// URL"; return 1; }
  read -r host port <<<"$target"
  # a folder of its own that the postgres user can reach (the state folder may be private)
  mkdir -p "$NOTIF_STATE"
  dir=$(mktemp -d "${TMPDIR:-/tmp}/notif-pgbouncer.XXXXXX")
  chmod 755 "$dir"
  printf 'PGBOUNCER_DIR=%q\n' "$dir" >"$NOTIF_STATE/pgbouncer.env"
  pport=$(free_port)
  printf '"postgres" ""\n' >"$dir/users.txt"
  cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=$host port=$port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $pport
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = ${PGBOUNCER_POOL_SIZE:-3}
max_client_conn = 2000
server_reset_query =
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
  if [ "$(id -u)" = 0 ]; then chown -R postgres "$dir"; fi
  as_pg_owner "$bin" -d -q "$dir/pgbouncer.ini" \
    || { log "pgbouncer: failed to start:"; cat "$dir/pgbouncer.log" >&2; return 1; }
  local i
  for i in $(seq 1 50); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$pport") 2>/dev/null; then break; fi
    sleep 0.1
  done
  export TEST_POOLER_URL="postgres://postgres@127.0.0.1:$pport/postgres?sslmode=disable"
  log "pgbouncer: transaction pooling on 127.0.0.1:$pport (pool ${PGBOUNCER_POOL_SIZE:-3} per database) in front of $host:$port"
}

pgbouncer_down() {
  [ -f "$NOTIF_STATE/pgbouncer.env" ] || return 0
  # shellcheck disable=SC1091
  . "$NOTIF_STATE/pgbouncer.env"
  if [ -f "$PGBOUNCER_DIR/pgbouncer.pid" ]; then
    kill "$(cat "$PGBOUNCER_DIR/pgbouncer.pid")" 2>/dev/null || true
  fi
  rm -rf "$PGBOUNCER_DIR" "$NOTIF_STATE/pgbouncer.env"
  unset TEST_POOLER_URL
  log "pgbouncer: stopped"
}

# ingest_watch_up PREFIX: serves the real ingest function with `cargo lambda watch`, as
# `make watch` does (ALLOW_ORG_HEADER=true, WEBHOOK_ALLOW_PRIVATE_ADDRESSES=true, migrating on start), against a database of its own
# on DATABASE_URL's server (PREFIX_<pid>), so what a run writes never meets another run's.
# Exports INGEST_URL (the function URL's base) and sets INGEST_WATCH_PID and INGEST_WATCH_DB
# for ingest_watch_down. Needs psql, cargo-lambda on PATH, and pg_up done.
ingest_watch_up() {
  INGEST_WATCH_DB=$1_$$
  psql -q "$DATABASE_URL" -c "CREATE DATABASE $INGEST_WATCH_DB" >/dev/null || return 1
  local db_url port
  db_url=$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' \
    "$DATABASE_URL" "$INGEST_WATCH_DB")
  log "ingest: building it as cargo lambda watch will (it would compile it on the first request)"
  cargo build -q --bin ingest || return 1
  port=$(free_port)
  printf '%s\n' \
    "DATABASE_URL='$db_url'" \
    "MIGRATE_ON_START='true'" \
    "ALLOW_ORG_HEADER='true'" \
    "WEBHOOK_ALLOW_PRIVATE_ADDRESSES='true'" \
    "RUST_LOG='warn'" \
    >"$NOTIF_STATE/watch.env"
  # only the env file's settings: not the test server's admin URL, a pooler or a rate limit
  env -u DATABASE_URL -u TEST_POOLER_URL -u DATABASE_CA_FILE -u INGEST_RATE_LIMIT_PER_ORG_PER_MIN \
    setsid cargo lambda watch --invoke-address 127.0.0.1 --invoke-port "$port" --ignore-changes \
    --env-file "$NOTIF_STATE/watch.env" >"$NOTIF_STATE/watch.log" 2>&1 </dev/null &
  INGEST_WATCH_PID=$!
  export INGEST_URL=http://127.0.0.1:$port/lambda-url/ingest
  # the first request starts the function (and migrates its database): wait for its answer
  local _
  for _ in $(seq 1 300); do
    if [ "$(curl -s -o /dev/null -m 600 -w '%{http_code}' "$INGEST_URL/notifications" 2>/dev/null)" = 401 ]; then
      log "ingest: cargo lambda watch serves it at $INGEST_URL"
      return 0
    fi
    kill -0 "$INGEST_WATCH_PID" 2>/dev/null || break
    sleep 1
  done
  log "ingest: the function did not answer under cargo lambda watch; its log:"
  tail -n 40 "$NOTIF_STATE/watch.log" >&2
  return 1
}

# ingest_watch_down: stops what ingest_watch_up started and drops its database.
ingest_watch_down() {
  if [ -n "${INGEST_WATCH_PID:-}" ]; then kill -- -"$INGEST_WATCH_PID" 2>/dev/null || true; fi
  if [ -n "${INGEST_WATCH_DB:-}" ]; then
    psql -q "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $INGEST_WATCH_DB WITH (FORCE)" >/dev/null 2>&1 || true
  fi
  INGEST_WATCH_PID= INGEST_WATCH_DB=
}

# services_session PREFIX: gives this run a state folder of its own and, when the script
# exits (also on failure), stops what it started there and removes the folder. A script with
# more to stop defines on_session_end, which runs first.
services_session() {
  NOTIF_STATE=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  trap services_session_end EXIT
}

services_session_end() {
  if declare -F on_session_end >/dev/null; then on_session_end; fi
  pgbouncer_down
  stand_in_down
  pg_down
  rm -rf "$NOTIF_STATE"
}
