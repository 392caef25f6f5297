# A throwaway Postgres cluster for the tests that need a real server (sourced by tests/run.sh).
#
# `pg_cluster_start` leaves CTXHOST_TEST_PG set to a connection string, or unset when there is
# no server to be had (the tests that need one then say so, and fail under CI=true):
# - CTXHOST_TEST_PG already set: that server is used as it is (nothing is started).
# - else Debian's `postgresql` is installed when initdb is missing (announced; skipped under
#   CTXHOST_NO_INSTALL=1 unless CI=true), and a cluster is made with initdb in a temporary
#   directory, listening on a Unix socket in that directory only (no TCP port), started with
#   pg_ctl and, at exit (a trap), stopped by its own pid file and removed.
#   CTXHOST_TEST_PG_RESTART is then a command that restarts it (the reconnect tests use it).
# initdb refuses to run as root: as root the cluster runs as the `postgres` user the package
# creates.

pg_cluster_dir=""
pg_cluster_as=()

pg_bindir() {
  local d
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
    return 0
  fi
  for d in /usr/lib/postgresql/*/bin; do
    if [[ -x "$d/initdb" && -x "$d/pg_ctl" ]]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

pg_cluster_stop() {
  if [[ -z "$pg_cluster_dir" ]]; then
    return 0
  fi
  local pidfile="$pg_cluster_dir/data/postmaster.pid"
  if [[ -f "$pidfile" ]]; then
    "${pg_cluster_as[@]}" "$pg_cluster_bin/pg_ctl" -D "$pg_cluster_dir/data" -m immediate -w stop \
      >/dev/null 2>&1 || {
      # pg_ctl could not stop it: end the postmaster by the pid its own pid file names.
      local pid
      pid="$(head -n 1 "$pidfile" 2>/dev/null || true)"
      if [[ "$pid" =~ ^[0-9]+$ ]]; then kill -9 "$pid" 2>/dev/null || true; fi
    }
  fi
  rm -rf "$pg_cluster_dir"
  pg_cluster_dir=""
}

pg_cluster_start() {
  local no_install="$1"
  if [[ -n "${CTXHOST_TEST_PG:-}" ]]; then
    echo "== postgres: the tests use the server CTXHOST_TEST_PG names"
    return 0
  fi
  if ! pg_cluster_bin="$(pg_bindir)"; then
    if [[ -n "$no_install" ]]; then
      echo "== postgres is missing and CTXHOST_NO_INSTALL is set: not installing it (the Postgres tests skip)"
      return 0
    fi
    echo "== installing Debian's postgresql (for the Postgres store tests): apt-get, as root;"
    echo "   CTXHOST_NO_INSTALL=1 skips this, CTXHOST_TEST_PG=URL uses a server of yours"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql
    pg_cluster_bin="$(pg_bindir)"
  fi
  pg_cluster_dir="$(mktemp -d "${TMPDIR:-/tmp}/ctxhost-pg.XXXXXX")"
  trap pg_cluster_stop EXIT
  if [[ "$(id -u)" -eq 0 ]]; then
    chown postgres: "$pg_cluster_dir"
    pg_cluster_as=(runuser -u postgres --)
  fi
  echo "== postgres: a throwaway cluster in $pg_cluster_dir (Unix socket only; removed at exit)"
  "${pg_cluster_as[@]}" "$pg_cluster_bin/initdb" -D "$pg_cluster_dir/data" -U ctxhost \
    --auth=trust -E UTF8 --no-sync >"$pg_cluster_dir/initdb.log" 2>&1 || {
    cat "$pg_cluster_dir/initdb.log" >&2
    return 1
  }
  # Room for the 4-process lease test (4 x 8 connections) and the suites running beside it.
  "${pg_cluster_as[@]}" "$pg_cluster_bin/pg_ctl" -D "$pg_cluster_dir/data" -l "$pg_cluster_dir/server.log" -w \
    -o "-c listen_addresses='' -k $pg_cluster_dir -c max_connections=200" start >/dev/null || {
    cat "$pg_cluster_dir/server.log" >&2
    return 1
  }
  export CTXHOST_TEST_PG="host=$pg_cluster_dir user=ctxhost dbname=postgres"
  export CTXHOST_TEST_PG_RESTART="${pg_cluster_as[*]} $pg_cluster_bin/pg_ctl -D $pg_cluster_dir/data -w -m fast restart -l $pg_cluster_dir/server.log"
}
