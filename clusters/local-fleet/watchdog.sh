#!/usr/bin/env bash
# Started by a local fleet in its own session: waits for the owning process to die and then kills
# every process group listed in RUN_DIR/pgids and removes RUN_DIR. A normal teardown kills this
# watchdog first, so it only acts when the owner crashed or was killed.
owner=$1
run_dir=$2
while kill -0 "$owner" 2>/dev/null; do sleep 0.5; done
if [[ -f "$run_dir/pgids" ]]; then
  while read -r pg; do [[ -n "$pg" ]] && kill -TERM -- "-$pg" 2>/dev/null; done <"$run_dir/pgids"
  sleep 3
  while read -r pg; do [[ -n "$pg" ]] && kill -KILL -- "-$pg" 2>/dev/null; done <"$run_dir/pgids"
fi
case "$run_dir" in
  */fleetcheck-*) rm -rf -- "$run_dir" ;;
esac
