#!/usr/bin/env bash
# Open MPI's remote launcher for the test hosts (--mca plm_rsh_agent): what ssh would do
# on a real cluster, done with nsenter into the target host's namespaces. Open MPI calls
# it as `rsh_agent.sh [options] HOST COMMAND...`; the command is a shell line (orted).
# Needs TH_DIR (the fixture's state dir, inherited from mpirun's environment).
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
host=$1
shift
[ -n "${TH_DIR:-}" ] && [ -f "$TH_DIR/pid/$host" ] || { echo "rsh_agent.sh: no test host '$host' (TH_DIR=${TH_DIR:-unset})" >&2; exit 255; }
exec nsenter -t "$(cat "$TH_DIR/pid/$host")" --net --uts --mount --wd="$PWD" -- env TMPDIR="$TH_DIR/$host/tmp" /bin/sh -c "$*"
