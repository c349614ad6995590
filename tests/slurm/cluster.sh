#!/usr/bin/env bash
# A one-node Slurm cluster on localhost for the tests: munged, slurmctld and slurmd,
# all run as root from a temporary directory, so nothing under /etc is touched.
#
#   eval "$(tests/slurm/cluster.sh start)"   # prints: export MRCNN_SLURM_DIR=...; export SLURM_CONF=...
#   tests/slurm/cluster.sh status            # needs MRCNN_SLURM_DIR (or the directory as $2)
#   tests/slurm/cluster.sh stop              # kills exactly the daemons start recorded, removes nothing else
#
# It installs nothing: the packages come from the Makefile's DEB_PKGS (`make deps`).
# Env: MRCNN_SLURM_DIR (state dir for start; default: a new mktemp dir),
#      MRCNN_SLURM_PORT (first port to try for slurmctld; slurmd gets the next free one),
#      MRCNN_SLURM_WAIT (seconds to wait for the node to become idle, default 60).
# Exit codes: 0 ok; 1 a daemon failed (its log is printed); 2 usage; 3 a program is missing.
set -u

log() { echo "cluster.sh: $*" >&2; }
die() { log "$*"; exit 1; }

. "$(dirname "${BASH_SOURCE[0]}")/../common/slurm_conf.sh"

need_programs() {
    local missing
    missing=$(slurm_missing_programs)
    if [ -n "$missing" ]; then
        log "missing programs: $missing (install the Makefile's DEB_PKGS with 'make deps')"
        exit 3
    fi
    local plugdir
    plugdir=$(slurm_plugin_dir)
    if [ ! -e "$plugdir/mpi_pmix.so" ]; then
        log "the Slurm PMIx plugin ($plugdir/mpi_pmix.so) is missing: install slurm-wlm-basic-plugins and libpmix2"
        exit 3
    fi
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {
    local p=$1
    while port_in_use "$p" || [ "$p" = "${2:-}" ]; do p=$((p + 1)); done
    echo "$p"
}

# Runs a daemon in the foreground in its own session and records its pid, so that
# stop kills exactly what start launched.
launch() {
    local name=$1; shift
    setsid "$@" > "$DIR/log/$name.out" 2>&1 < /dev/null &
    echo $! > "$DIR/pid/$name"
}

alive() { [ -f "$DIR/pid/$1" ] && kill -0 "$(cat "$DIR/pid/$1")" 2>/dev/null; }

show_logs() {
    local f
    for f in "$DIR"/log/*; do
        [ -s "$f" ] || continue
        echo "---- $f (last 25 lines)" >&2
        tail -n 25 "$f" >&2
    done
}

write_conf() {
    local cpus sockets cores threads mem
    # slurmd -C reports what slurmd itself will detect; a configured size larger than
    # that would put the node in INVAL state.
    read -r cpus sockets cores threads mem < <(slurmd -C 2>/dev/null | awk '
        { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
        END { print v["CPUs"], v["SocketsPerBoard"], v["CoresPerSocket"], v["ThreadsPerCore"], v["RealMemory"] }')
    [ -n "${mem:-}" ] || die "slurmd -C did not report the node's CPUs and memory"
    local ctl_port node_port
    ctl_port=$(free_port "${MRCNN_SLURM_PORT:-6817}")
    node_port=$(free_port $((ctl_port + 1)) "$ctl_port")
    cat > "$DIR/slurm.conf" <<EOF
# Written by tests/slurm/cluster.sh for a one-node test cluster; not a site config.
ClusterName=mrcnntest
SlurmctldHost=localhost
SlurmctldPort=$ctl_port
SlurmdPort=$node_port
$(slurm_conf_policy "$DIR/munge/munge.socket")
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    # An empty cgroup.conf keeps slurmd from searching /etc/slurm for one; mpi.conf keeps
    # the PMIx client directories inside $DIR instead of /tmp.
    : > "$DIR/cgroup.conf"
    mkdir -p "$DIR/pmix"
    echo "PMIxCliTmpDirBase=$DIR/pmix" > "$DIR/mpi.conf"
}

start_munge() {
    mkdir -p "$DIR/munge"
    chmod 700 "$DIR/munge"
    local key=$DIR/munge/munge.key
    if [ ! -s "$key" ]; then
        if command -v mungekey >/dev/null 2>&1; then
            mungekey --create --keyfile="$key" >/dev/null 2>&1 || die "mungekey could not create $key"
        else
            dd if=/dev/urandom of="$key" bs=1024 count=1 status=none || die "could not create $key"
        fi
    fi
    chmod 600 "$key"
    # --force: the temp dir's parent (/tmp) is world-writable, which munged would refuse.
    launch munged munged --foreground --force --key-file="$key" --socket="$DIR/munge/munge.socket" \
        --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/seed"
    local i
    for i in $(seq 50); do
        [ -S "$DIR/munge/munge.socket" ] && return 0
        alive munged || break
        sleep 0.1
    done
    show_logs
    die "munged did not start"
}

node_state() { SLURM_CONF=$DIR/slurm.conf sinfo -h -N -n localhost -o '%T' 2>/dev/null | head -n1; }

cmd_start() {
    need_programs
    if [ -n "${MRCNN_SLURM_DIR:-}" ]; then
        DIR=$MRCNN_SLURM_DIR
        mkdir -p "$DIR"
    else
        DIR=$(mktemp -d /tmp/mrcnn-slurm.XXXXXX)
    fi
    DIR=$(cd "$DIR" && pwd)
    if [ -d "$DIR/pid" ]; then
        local n
        for n in munged slurmctld slurmd; do
            alive "$n" && die "$DIR already runs $n (pid $(cat "$DIR/pid/$n")); stop it first"
        done
    fi
    mkdir -p "$DIR/state" "$DIR/spool/localhost" "$DIR/run" "$DIR/log" "$DIR/pid"
    write_conf
    start_munge
    export SLURM_CONF=$DIR/slurm.conf
    launch slurmctld slurmctld -D -c -f "$SLURM_CONF"
    local i
    for i in $(seq 100); do
        scontrol ping 2>/dev/null | grep -q UP && break
        alive slurmctld || { show_logs; die "slurmctld exited"; }
        sleep 0.2
    done
    launch slurmd slurmd -D -N localhost -f "$SLURM_CONF"
    local wait_s=${MRCNN_SLURM_WAIT:-60} state=""
    for i in $(seq $((wait_s * 5))); do
        state=$(node_state)
        case "$state" in idle*) break ;; esac
        alive slurmctld || { show_logs; die "slurmctld exited"; }
        alive slurmd || { show_logs; die "slurmd exited"; }
        sleep 0.2
    done
    case "$state" in
        idle*) ;;
        *) show_logs; die "node 'localhost' is '$state' after ${wait_s}s, not idle" ;;
    esac
    log "up in $DIR (slurmctld port $(awk -F= '/^SlurmctldPort/ {print $2}' "$SLURM_CONF"), node idle)"
    echo "export MRCNN_SLURM_DIR=$DIR; export SLURM_CONF=$DIR/slurm.conf"
}

cmd_stop() {
    local n pid i
    # slurmd first, so that it does not report the controller as gone; then the
    # controller; munged last since both talk to it on the way down.
    for n in slurmd slurmctld munged; do
        [ -f "$DIR/pid/$n" ] || continue
        pid=$(cat "$DIR/pid/$n")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null
            for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            if kill -0 "$pid" 2>/dev/null; then
                log "$n (pid $pid) ignored SIGTERM for 5 s; sending SIGKILL"
                kill -KILL "$pid" 2>/dev/null
            fi
        fi
        rm -f "$DIR/pid/$n"
    done
    log "stopped the daemons of $DIR"
}

cmd_status() {
    local n rc=0
    for n in munged slurmctld slurmd; do
        if alive "$n"; then echo "$n: running (pid $(cat "$DIR/pid/$n"))"; else echo "$n: not running"; rc=1; fi
    done
    [ $rc -eq 0 ] && echo "node localhost: $(node_state)"
    return $rc
}

case "${1:-}" in
    start) cmd_start ;;
    stop|status)
        DIR=${2:-${MRCNN_SLURM_DIR:-}}
        [ -n "$DIR" ] && [ -d "$DIR" ] || { log "$1: set MRCNN_SLURM_DIR (printed by start) or pass the directory"; exit 2; }
        "cmd_$1" ;;
    *) echo "usage: $0 start|stop|status [dir]" >&2; exit 2 ;;
esac
