#!/usr/bin/env bash
# A hand-written deploy guard, done the usual way, for benchmarks/bench_one_host.py to race
# `fab guard` against. Same work, same judgment:
#   1. ssh HOST docker inspect backend   -> APP_TASK_TIMEOUT_S and State.StartedAt
#   2. ssh -L LOCAL:127.0.0.1:5432 HOST  -> a tunnel to the host's database
#   3. psql through the tunnel           -> live = running, claimed since the container
#      started (older claims are orphans), lease (2 x timeout) not expired; a running row
#      with no claimed_at cannot be proven dead, so it is live too
# Prints `decision=defer live=N` (exit 75) or `decision=proceed live=0` (exit 0); any
# failure exits 1.
#
# usage: shell_guard.sh SSH_CONFIG HOST DBNAME LOCAL_PORT
set -euo pipefail

ssh_config=$1 host=$2 dbname=$3 local_port=$4
ssh_opts=(-F "$ssh_config")

inspect=$(ssh "${ssh_opts[@]}" "$host" docker inspect --type container \
    --format "'{{.State.StartedAt}}{{range .Config.Env}}{{println}}{{.}}{{end}}'" backend)
started=${inspect%%$'\n'*}
timeout_s=$(printf '%s\n' "$inspect" | sed -n 's/^APP_TASK_TIMEOUT_S=//p')
if [[ -z $started || ! $timeout_s =~ ^[0-9]+([.][0-9]+)?$ ]]; then
    echo "shell_guard: no usable StartedAt / APP_TASK_TIMEOUT_S on $host" >&2
    exit 1
fi
lease_s=$(awk -v t="$timeout_s" 'BEGIN { print 2 * t }')

control=$(mktemp -u "${TMPDIR:-/tmp}/shell-guard.XXXXXX")
ssh "${ssh_opts[@]}" -f -N -M -S "$control" -o ExitOnForwardFailure=yes \
    -L "127.0.0.1:$local_port:127.0.0.1:5432" "$host"
trap 'ssh "${ssh_opts[@]}" -S "$control" -O exit "$host" 2>/dev/null || true' EXIT

live=$(psql -X -A -t -q -v ON_ERROR_STOP=1 -v started="$started" -v lease_s="$lease_s" \
    "host=127.0.0.1 port=$local_port dbname=$dbname user=postgres connect_timeout=10" <<'SQL'
SET statement_timeout = '5s';
SELECT count(*) FROM execution_runs
WHERE status = 'running'
  AND (claimed_at IS NULL
       OR (claimed_at >= :'started'::timestamptz
           AND claimed_at + make_interval(secs => :lease_s) > now()));
SQL
)

if [[ $live -gt 0 ]]; then
    echo "decision=defer live=$live"
    exit 75
fi
echo "decision=proceed live=0"
