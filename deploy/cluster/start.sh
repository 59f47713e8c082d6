#!/usr/bin/env bash
# Start a three-node Restate cluster on loopback (replication 2) from the pinned binary.
# Usage: deploy/cluster/start.sh [BASE_DIR]   — stop it with: kill $(cat BASE_DIR/*.pid)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
base=${1:-$root/.lash/cluster}
server=$(ls "$root"/node_modules/@restatedev/restate-server-*/bin/restate-server | head -n 1)
mkdir -p "$base"
for i in 1 2 3; do
  "$server" --config-file "$here/node$i.toml" --base-dir "$base/n$i" --listen-mode tcp --no-logo \
    > "$base/n$i.log" 2>&1 &
  echo $! > "$base/n$i.pid"
done
for port in 9170 9270 9370; do
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    sleep 0.5
  done
done
echo "cluster up: ingress http://127.0.0.1:8180 (also 8280, 8380), admin http://127.0.0.1:9170; logs in $base"
