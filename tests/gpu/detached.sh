#!/usr/bin/env bash
# A GPU job that outlives one device call (README, "GPU suite"): the whole suite takes ~20 min,
# a call at most 10. Run the calls back to back: the machine is given back once idle.
#   bash tests/gpu/detached.sh start 'COMMAND'   copy the tree (no .git) to $KG_JOB/tree and run
#                                                COMMAND there, detached, with OUT=$KG_JOB/out
#   bash tests/gpu/detached.sh wait SECONDS      wait up to SECONDS for it to end; copy its log
#                                                and outputs to $OUT/job; print the log's tail
set -uo pipefail
job=${KG_JOB:-/tmp/kg-detached}
case "${1:-}" in
  start)
    [ $# -eq 2 ] || { echo "usage: $0 start 'COMMAND'" >&2; exit 2; }
    rm -rf "$job" && mkdir -p "$job/tree" "$job/out"
    tar --exclude=.git -C "$(dirname "$0")/../.." -cf - . | tar -xf - -C "$job/tree"
    cd "$job/tree" || exit 1
    # shellcheck disable=SC2016  # $job expands here, the command's own variables in the job
    setsid nohup bash -c "export OUT='$job/out'; ( $2 ) > '$job/log' 2>&1; echo \$? > '$job/rc'" \
      > /dev/null 2>&1 < /dev/null &
    echo "started in $job"
    ;;
  wait)
    limit=${2:-570}
    # A machine can be swapped between calls: a fresh one has no job, so say so at once
    # rather than wait out the call for nothing.
    [ -d "$job" ] || { echo "no job on this machine (a fresh one: the job was lost with the last)"; exit 3; }
    for ((waited = 0; waited < limit; waited += 5)); do [ -f "$job/rc" ] && break; sleep 5; done
    back=${OUT:-$PWD/.gpu-out}/job
    mkdir -p "$back"
    cp "$job/log" "$back/log" 2>/dev/null
    cp -r "$job/out/." "$back/" 2>/dev/null
    if [ -f "$job/rc" ]; then echo "job ended, status $(cat "$job/rc")"; else echo "job still running"; fi
    tail -c 9000 "$job/log" 2>/dev/null
    ;;
  *)
    echo "usage: $0 start 'COMMAND' | wait SECONDS" >&2
    exit 2
    ;;
esac
