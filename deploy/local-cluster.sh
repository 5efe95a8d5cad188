#!/usr/bin/env bash
# Runs a local 3-node baton cluster on 127.0.0.1:7001-7003 with data in ./baton-local/.
# Ctrl-C (or SIGTERM) stops all three nodes. Build first: cargo build --release.
set -euo pipefail
bin="${BATON_NODE_BIN:-$(dirname "$0")/../target/release/baton-node}"
[ -x "$bin" ] || { echo "no $bin: run 'cargo build --release' first" >&2; exit 1; }
data="${BATON_LOCAL_DIR:-./baton-local}"
cluster="1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003"
pids=()
stop() { kill -TERM "${pids[@]}" 2>/dev/null || true; wait; }
trap stop INT TERM EXIT
mkdir -p "$data"
for id in 1 2 3; do
  "$bin" --node-id "$id" --listen "127.0.0.1:700$id" --data-dir "$data/node$id" \
    --initial-cluster "$cluster" 2>>"$data/node$id.log" &
  pids+=("$!")
  echo "node $id: pid $! on 127.0.0.1:700$id, log $data/node$id.log"
done
echo "try: baton --endpoints 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 cluster status"
wait
