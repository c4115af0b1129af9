#!/usr/bin/env bash
# A real Citus cluster for development: a coordinator and two workers on 127.0.0.1, built from
# the vendored upstream sources against Debian's PostgreSQL 15 (Citus is in no package
# registry these machines reach). Run as root (apt, make install); the servers run as the
# `postgres` user, because PostgreSQL refuses to run as root.
#
#   scripts/citus.sh build   apt-install PostgreSQL 15 and the build deps, build and install
#                            Citus and pgvector (skipped when the right versions are installed;
#                            with DESTDIR, into that scratch root instead: a check of the build
#                            from the vendored sources on a machine where they are installed)
#   scripts/citus.sh start   build if needed, initdb (once) and start the three servers
#   scripts/citus.sh stop    stop the three servers, by the pid in each postmaster.pid
#   scripts/citus.sh url     print the coordinator's URL (postgresql://postgres@127.0.0.1:PORT/postgres)
#   scripts/citus.sh status  print which servers are running
#
# Environment: CITUS_SRC / PGVECTOR_SRC (source tarballs or unpacked trees; default
# ../shared/vendor/), CITUS_DIR (data and logs; default .chatbot/citus), CITUS_PORT (the
# coordinator's port, the workers take the next two; default 9700).
#
# The node list is per database: whoever creates a database on this cluster creates the citus
# extension in it and registers the workers there (`chatbot migrate --citus` refuses to place
# tables when it finds no workers; tests/fixtures/postgres.py does all of it for the suite).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENDOR="${VENDOR:-$ROOT/../shared/vendor}"
[ -d "$VENDOR" ] || VENDOR="/work/shared/vendor"
CITUS_VERSION="13.2.2"
CITUS_EXT_VERSION="13.2-1"
PGVECTOR_VERSION="0.8.1"
CITUS_SRC="${CITUS_SRC:-$VENDOR/citus-$CITUS_VERSION.tar.gz}"
PGVECTOR_SRC="${PGVECTOR_SRC:-$VENDOR/pgvector-$PGVECTOR_VERSION.tar.gz}"
CITUS_DIR="${CITUS_DIR:-$ROOT/.chatbot/citus}"
CITUS_PORT="${CITUS_PORT:-9700}"
PG_BIN="/usr/lib/postgresql/15/bin"
PG_CONFIG="$PG_BIN/pg_config"
# make install honours DESTDIR (PGXS and Citus' makefiles), and so does the installed check.
export DESTDIR="${DESTDIR:-}"
EXT_DIR="$DESTDIR/usr/share/postgresql/15/extension"
NODES=(coordinator worker1 worker2)

log() { echo "citus.sh: $*" >&2; }

as_postgres() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

installed_version() { # $1 control file; prints its default_version or nothing
    [ -f "$EXT_DIR/$1" ] && sed -n "s/^default_version = '\(.*\)'/\1/p" "$EXT_DIR/$1" || true
}

unpack() { # $1 tarball or directory, $2 destination; prints the tree to build in
    if [ -d "$1" ]; then
        cp -a "$1" "$2/src" && echo "$2/src"
    else
        tar -xzf "$1" -C "$2" && find "$2" -mindepth 1 -maxdepth 1 -type d | head -1
    fi
}

cmd_build() {
    if [ "$(installed_version citus.control)" = "$CITUS_EXT_VERSION" ] &&
        [ "$(installed_version vector.control)" = "$PGVECTOR_VERSION" ] &&
        [ -f "$DESTDIR/usr/lib/postgresql/15/lib/citus.so" ]; then
        log "Citus $CITUS_VERSION and pgvector $PGVECTOR_VERSION already installed"
        return
    fi
    [ "$(id -u)" = 0 ] || { log "build needs root (apt-get, make install)"; exit 1; }
    local pkgs=(postgresql-15 postgresql-contrib postgresql-server-dev-15 libcurl4-openssl-dev
        liblz4-dev libzstd-dev libkrb5-dev libssl-dev libselinux1-dev libxslt1-dev libpam0g-dev
        libreadline-dev autoconf flex bison make gcc)
    local missing=()
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        log "apt-get install ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    local work
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' RETURN
    if [ "$(installed_version citus.control)" != "$CITUS_EXT_VERSION" ]; then
        mkdir -p "$work/citus"
        local src
        src="$(unpack "$CITUS_SRC" "$work/citus")"
        log "building Citus $CITUS_VERSION in $src"
        # PostgreSQL 15.18's headers export have_createdb_privilege(), which Citus 13.2.2's
        # compatibility header defines again as static for every PG 15: rename the copy (the
        # callers then use the server's own), only when the server declares it.
        if grep -q "extern bool have_createdb_privilege" /usr/include/postgresql/15/server/commands/dbcommands.h; then
            sed -i 's/^have_createdb_privilege(void)/citus_unused_have_createdb_privilege(void)/' \
                "$src/src/include/pg_version_compat.h"
        fi
        (cd "$src" && ./configure -q PG_CONFIG="$PG_CONFIG" >/dev/null &&
            make -s -j"$(nproc)" >/dev/null && make -s install >/dev/null)
    fi
    if [ "$(installed_version vector.control)" != "$PGVECTOR_VERSION" ]; then
        mkdir -p "$work/pgvector"
        local src
        src="$(unpack "$PGVECTOR_SRC" "$work/pgvector")"
        log "building pgvector $PGVECTOR_VERSION in $src"
        (cd "$src" && make -s PG_CONFIG="$PG_CONFIG" OPTFLAGS="" >/dev/null &&
            make -s install PG_CONFIG="$PG_CONFIG" >/dev/null)
    fi
    log "installed Citus $(installed_version citus.control), pgvector $(installed_version vector.control)"
}

port_of() { # $1 node index
    echo $((CITUS_PORT + $1))
}

pid_of() { # $1 data dir; prints the postmaster's pid when it is alive
    local pidfile="$1/postmaster.pid"
    [ -f "$pidfile" ] || return 0
    local pid
    pid="$(head -1 "$pidfile")"
    if kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
}

init_node() { # $1 data dir, $2 port
    local data="$1"
    [ -f "$data/PG_VERSION" ] && return
    mkdir -p "$data"
    chown postgres: "$data" "$CITUS_DIR"
    chmod 700 "$data"
    as_postgres "$PG_BIN/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    # Trust on 127.0.0.1 only: a development cluster, reachable from this machine alone.
    cat >>"$data/postgresql.conf" <<EOF

# scripts/citus.sh
listen_addresses = '127.0.0.1'
port = $2
unix_socket_directories = '$data'
shared_preload_libraries = 'citus,pg_stat_statements'
pg_stat_statements.track = 'all'
pg_stat_statements.max = 10000
citus.stat_statements_track = 'all'
# The nodes talk over 127.0.0.1 without TLS (Citus asks for it by default).
citus.node_conninfo = 'sslmode=disable'
# CREATE DATABASE on the coordinator creates it on the workers too (Citus 12.2+).
citus.enable_create_database_propagation = on
max_connections = 700
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
max_prepared_transactions = 200
# Citus runs a maintenance worker per database it is used in (the suite makes many).
max_worker_processes = 128
log_min_messages = warning
log_min_error_statement = panic
EOF
}

cmd_start() {
    cmd_build
    mkdir -p "$CITUS_DIR"
    chown postgres: "$CITUS_DIR"
    local i
    for i in 0 1 2; do
        local data="$CITUS_DIR/${NODES[$i]}"
        init_node "$data" "$(port_of "$i")"
        if [ -n "$(pid_of "$data")" ]; then
            log "${NODES[$i]} already running on port $(port_of "$i")"
            continue
        fi
        as_postgres "$PG_BIN/pg_ctl" -D "$data" -l "$CITUS_DIR/${NODES[$i]}.log" -w -t 60 start >/dev/null
        log "${NODES[$i]} started on 127.0.0.1:$(port_of "$i") (pid $(pid_of "$data"))"
    done
    register_workers
    echo "postgresql://postgres@127.0.0.1:$(port_of 0)/postgres"
}

psql_on() { # $1 port, $2 database, then psql arguments
    local port="$1" db="$2"
    shift 2
    PGOPTIONS="-c client_min_messages=warning" "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -At -h 127.0.0.1 -p "$port" -U postgres -d "$db" "$@"
}

register_workers() {
    # The maintenance database `postgres` of each node gets the extension, and the coordinator's
    # lists the workers: that makes CREATE DATABASE on the coordinator reach the workers, and
    # tells whoever makes a database (tests/fixtures/postgres.py) which workers to register in it.
    local i
    for i in 1 2; do psql_on "$(port_of "$i")" postgres -c "create extension if not exists citus"; done
    local coordinator
    coordinator="$(port_of 0)"
    psql_on "$coordinator" postgres -c "create extension if not exists citus"
    psql_on "$coordinator" postgres -c "select citus_set_coordinator_host('127.0.0.1', $coordinator)" >/dev/null
    for i in 1 2; do
        if [ -z "$(psql_on "$coordinator" postgres -c "select 1 from pg_dist_node where nodeport = $(port_of "$i")")" ]; then
            psql_on "$coordinator" postgres -c "select citus_add_node('127.0.0.1', $(port_of "$i"))" >/dev/null
        fi
    done
}

cmd_stop() {
    local i
    for i in 0 1 2; do
        local data="$CITUS_DIR/${NODES[$i]}"
        local pid
        pid="$(pid_of "$data")"
        [ -n "$pid" ] || continue
        kill -INT "$pid" # fast shutdown
        local n=0
        while kill -0 "$pid" 2>/dev/null && [ $n -lt 600 ]; do
            sleep 0.1
            n=$((n + 1))
        done
        log "${NODES[$i]} (pid $pid) stopped"
    done
}

cmd_status() {
    local i
    for i in 0 1 2; do
        local pid
        pid="$(pid_of "$CITUS_DIR/${NODES[$i]}")"
        if [ -n "$pid" ]; then
            echo "${NODES[$i]} 127.0.0.1:$(port_of "$i") running (pid $pid)"
        else
            echo "${NODES[$i]} 127.0.0.1:$(port_of "$i") stopped"
        fi
    done
}

case "${1:-start}" in
build) cmd_build ;;
start) cmd_start ;;
stop) cmd_stop ;;
url) echo "postgresql://postgres@127.0.0.1:$(port_of 0)/postgres" ;;
status) cmd_status ;;
*)
    echo "usage: $0 build|start|stop|url|status" >&2
    exit 2
    ;;
esac
