#!/usr/bin/env bash
# Two test hosts on one machine: each host is a set of namespaces held by one
# process: a network namespace (its own loopback and one end of a veth pair), a UTS
# namespace (its own hostname) and a mount namespace (its own /etc/hosts naming both
# hosts, its own /dev/shm, and TH_DIR/local: a node-local directory, the host's own
# TH_DIR/<host>/local bind-mounted there). Everything else, /tmp included, is shared,
# as a cluster's shared storage would be. Traffic flows only over the veth pair: the
# machine's real network is never touched, and nothing outside the two namespaces can
# reach them.
#
# Sourced by tests/cluster/test_*.sh:
#   th_require              skips (exit 77, "skip [netns]: ...") unless root with netns + veth
#   th_up                   creates the hosts (TH_DIR, TH_HOSTS, TH_IPS, TH_NET), a janitor
#                           that tears them down should this shell die without its trap
#   th_exec HOST CMD...     runs CMD on HOST (nsenter into its net, uts and mount namespaces)
#   th_bg HOST LOG CMD...   the same in the background, in its own session; $! is its pid
#   th_pids HOST            every process on HOST (same network namespace), one a line
#   th_procs HOST [NAME]    the host's processes but the holder (whose comm is NAME, if given)
#   th_kill_host HOST SIG [NAME]  sends SIG to every process on HOST except the namespace
#                           holder (only those whose comm is NAME, if given)
#   th_link HOST up|down    the host's end of the veth pair
#   th_blackhole HOST on|off  drops (on) every packet HOST sends to the other host
#   th_register_dir DIR     DIR (under /tmp/mrcnn-*) is removed by teardown too
#   th_down                 kills every process on both hosts (SIGKILL, bounded loop), which
#                           frees the namespaces and the veth pair, then removes TH_DIR
#   th_check_clean          fails unless the namespaces, veths, processes and TH_DIR are gone
# Run directly: hosts.sh janitor OWNER_PID DIR (internal), hosts.sh down DIR (manual cleanup).
# Env: TH_NAMES (default "mrcnn-h1 mrcnn-h2"), TH_SUBNET (default 10.217.0: .1 and .2).

TH_LIB=$(readlink -f "${BASH_SOURCE[0]}")
TH_NAMES=${TH_NAMES:-mrcnn-h1 mrcnn-h2}
TH_SUBNET=${TH_SUBNET:-10.217.0}

th_log() { echo "hosts.sh: $*" >&2; }

th_require() {
    local why=""
    if [ "$(id -u)" != 0 ]; then
        why="not root: network namespaces and veth pairs need CAP_NET_ADMIN and CAP_SYS_ADMIN"
    else
        local p
        for p in ip unshare nsenter setsid mount; do
            command -v "$p" > /dev/null 2>&1 || { why="$p is missing"; break; }
        done
        if [ -z "$why" ]; then
            # A throwaway namespace with a veth inside proves both kernel features.
            if ! unshare --net -- sh -c 'ip link add th0 type veth peer name th1 && ip link set lo up' > /dev/null 2>&1; then
                why="cannot create a network namespace with a veth pair here (unshare --net; ip link add type veth)"
            elif ! unshare --uts --mount --propagation private -- sh -c 'hostname th-probe && mount -t tmpfs tmpfs /mnt' > /dev/null 2>&1; then
                why="cannot create UTS + mount namespaces here (unshare --uts --mount)"
            fi
        fi
    fi
    if [ -n "$why" ]; then
        source "$(dirname "$TH_LIB")/../common/skip.sh"
        skip netns "$why"
    fi
}

th_holder() { cat "$TH_DIR/pid/$1"; }

th_up() {
    TH_DIR=$(mktemp -d /tmp/mrcnn-cluster.XXXXXX) || return 1
    export TH_DIR TH_LIB
    TH_HOSTS=() TH_IPS=()
    mkdir -p "$TH_DIR/pid" "$TH_DIR/local"
    TH_VETH=("th${$}a" "th${$}b")
    echo "${TH_VETH[*]}" > "$TH_DIR/veth"
    # The janitor outlives this shell only if the shell dies without running its trap
    # (SIGKILL); then it tears everything down within a second.
    local owner=$BASHPID # this shell ($$ would be the parent of a subshell)
    setsid bash "$TH_LIB" janitor "$owner" "$TH_DIR" > /dev/null 2>&1 < /dev/null &
    echo $! > "$TH_DIR/janitor.pid"
    disown $!
    {
        echo "127.0.0.1 localhost"
        local i=1 n
        for n in $TH_NAMES; do echo "$TH_SUBNET.$i $n"; i=$((i + 1)); done
    } > "$TH_DIR/hosts"
    local i=1 n
    for n in $TH_NAMES; do
        TH_HOSTS+=("$n")
        TH_IPS+=("$TH_SUBNET.$i")
        mkdir -p "$TH_DIR/$n/local" "$TH_DIR/$n/tmp"
        # The holder: sets up its mount namespace, says so, then sleeps until killed.
        setsid unshare --net --uts --mount --propagation private -- bash -c '
            set -e
            hostname "$1"
            mount --bind "$2/hosts" /etc/hosts
            mount -t tmpfs -o size=512m,mode=1777 tmpfs /dev/shm
            mount --bind "$2/$1/local" "$2/local"
            ip link set lo up
            touch "$2/$1/ready"
            exec sleep infinity' th-holder "$n" "$TH_DIR" > "$TH_DIR/$n/holder.log" 2>&1 < /dev/null &
        echo $! > "$TH_DIR/pid/$n"
        disown $!
        i=$((i + 1))
    done
    local k
    for n in "${TH_HOSTS[@]}"; do
        for k in $(seq 100); do [ -e "$TH_DIR/$n/ready" ] && break; sleep 0.05; done
        [ -e "$TH_DIR/$n/ready" ] || { th_log "host $n did not come up: $(cat "$TH_DIR/$n/holder.log")"; return 1; }
    done
    # The veth pair: created here, each end moved into its host at once.
    ip link add "${TH_VETH[0]}" type veth peer name "${TH_VETH[1]}" || return 1
    for i in 0 1; do
        n=${TH_HOSTS[$i]}
        ip link set "${TH_VETH[$i]}" netns "$(th_holder "$n")" || return 1
        th_exec "$n" ip addr add "${TH_IPS[$i]}/24" dev "${TH_VETH[$i]}" || return 1
        th_exec "$n" ip link set "${TH_VETH[$i]}" up || return 1
    done
    TH_NET=$TH_SUBNET.0/24
    export TH_NET
    # Both ends up and each host reaching the other by name (bash's /dev/tcp to a closed
    # port: "connection refused" means the packet got there and back).
    for k in $(seq 100); do
        th_exec "${TH_HOSTS[0]}" bash -c "exec 3<>/dev/tcp/${TH_HOSTS[1]}/9" 2>&1 | grep -q refused &&
            th_exec "${TH_HOSTS[1]}" bash -c "exec 3<>/dev/tcp/${TH_HOSTS[0]}/9" 2>&1 | grep -q refused && break
        sleep 0.1
    done
    [ "$k" -lt 100 ] || { th_log "the hosts cannot reach each other over the veth pair"; return 1; }
    th_log "up: ${TH_HOSTS[0]} (${TH_IPS[0]}) <-> ${TH_HOSTS[1]} (${TH_IPS[1]}) over ${TH_VETH[0]}/${TH_VETH[1]}, state $TH_DIR"
}

# A directory of the test's (under /tmp/mrcnn-*) that teardown removes too, also the janitor's.
th_register_dir() { echo "$1" >> "$TH_DIR/extra_dirs"; }

# Node-local temporary directory: each host gets its own TMPDIR (Open MPI's session
# directory, PMIx rendezvous files), as on separate machines.
th_exec() {
    local h=$1
    shift
    nsenter -t "$(th_holder "$h")" --net --uts --mount --wd="$PWD" -- env TMPDIR="$TH_DIR/$h/tmp" "$@"
}

th_bg() {
    local h=$1 log=$2
    shift 2
    setsid nsenter -t "$(th_holder "$h")" --net --uts --mount --wd="$PWD" -- env TMPDIR="$TH_DIR/$h/tmp" "$@" > "$log" 2>&1 < /dev/null &
    disown $! # ended by th_down, not waited for: no "Killed" job reports
}

# Every process in the network namespace that the holder of host $2 (in state dir $1) holds.
th_ns_pids() {
    local dir=$1 h=$2 holder ns p
    holder=$(cat "$dir/pid/$h" 2>/dev/null) || return 0
    ns=$(readlink "/proc/$holder/ns/net" 2>/dev/null) || return 0
    [ "$ns" = "$(readlink /proc/$$/ns/net)" ] && return 0 # never the machine's own
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$ns" ] && echo "${p#/proc/}"
    done
}

th_pids() { th_ns_pids "$TH_DIR" "$1"; }

th_procs() { # host [name]: the host's processes but the namespace holder (comm NAME only, if given)
    local h=$1 name=${2:-} holder p
    holder=$(th_holder "$h")
    for p in $(th_pids "$h"); do
        [ "$p" = "$holder" ] && continue
        [ -n "$name" ] && [ "$(cat "/proc/$p/comm" 2>/dev/null)" != "$name" ] && continue
        echo "$p"
    done
}

th_kill_host() { # host signal [name]
    local p
    p=$(th_procs "$1" "${3:-}")
    [ -n "$p" ] && kill -"$2" $p 2>/dev/null
    return 0
}

th_veth_of() { local i; for i in 0 1; do [ "${TH_HOSTS[$i]}" = "$1" ] && echo "${TH_VETH[$i]}"; done; }

th_link() { th_exec "$1" ip link set "$(th_veth_of "$1")" "$2"; }

th_blackhole() { # host on|off: a blackhole route for the other host's address
    local h=$1 other i
    for i in 0 1; do [ "${TH_HOSTS[$i]}" != "$h" ] && other=${TH_IPS[$i]}; done
    if [ "$2" = on ]; then th_exec "$h" ip route add blackhole "$other/32"; else th_exec "$h" ip route del blackhole "$other/32"; fi
}

# Teardown of state dir $1, usable from the trap, the janitor and by hand.
th_teardown_dir() {
    local dir=$1 h pids round janitor
    [ -d "$dir" ] || return 0
    for round in $(seq 50); do
        pids=""
        for h in $(ls "$dir/pid" 2>/dev/null); do pids="$pids $(th_ns_pids "$dir" "$h")"; done
        [ -z "$(echo $pids)" ] && break
        kill -KILL $pids 2>/dev/null
        sleep 0.1
    done
    [ -n "$(echo $pids)" ] && th_log "processes still on the test hosts after 5 s: $pids"
    # A veth still in the machine's namespace (a failed th_up) is deleted; the moved ones
    # vanished with their namespaces.
    for v in $(cat "$dir/veth" 2>/dev/null); do ip link del "$v" 2> /dev/null; done
    janitor=$(cat "$dir/janitor.pid" 2>/dev/null)
    local extra
    while read -r extra; do
        case "$extra" in /tmp/mrcnn-*) rm -rf "$extra" ;; esac
    done < <(cat "$dir/extra_dirs" 2>/dev/null)
    rm -rf "$dir"
    [ -n "$janitor" ] && [ "$janitor" != "$$" ] && kill "$janitor" 2>/dev/null
    return 0
}

th_down() {
    [ -n "${TH_DIR:-}" ] || return 0
    local h
    TH_LAST_DIR=$TH_DIR TH_LAST_VETH=$(cat "$TH_DIR/veth" 2>/dev/null) TH_LAST_PIDS=""
    for h in $(ls "$TH_DIR/pid" 2>/dev/null); do TH_LAST_PIDS="$TH_LAST_PIDS $(cat "$TH_DIR/pid/$h")"; done
    TH_LAST_PIDS="$TH_LAST_PIDS $(cat "$TH_DIR/janitor.pid" 2>/dev/null)"
    th_teardown_dir "$TH_DIR"
    TH_DIR=""
}

# After th_down: fails unless its state dir, veths, namespace holders and janitor are gone.
th_check_clean() {
    local bad=0 v p
    [ -e "$TH_LAST_DIR" ] && { echo "not clean: $TH_LAST_DIR still exists"; bad=1; }
    for v in $TH_LAST_VETH; do ip link show "$v" > /dev/null 2>&1 && { echo "not clean: veth $v still exists"; bad=1; }; done
    for p in $TH_LAST_PIDS; do
        for _ in $(seq 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$p" 2>/dev/null && { echo "not clean: process $p ($(tr '\0' ' ' < /proc/$p/cmdline)) still runs"; bad=1; }
    done
    return $bad
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case "${1:-}" in
    janitor)
        owner=$2 dir=$3
        while kill -0 "$owner" 2>/dev/null && [ -d "$dir" ]; do sleep 1; done
        th_teardown_dir "$dir"
        ;;
    down)
        [ -n "${2:-}" ] || { echo "usage: $0 down DIR" >&2; exit 2; }
        th_teardown_dir "$2"
        ;;
    *) echo "usage: source $0 (library), or $0 down DIR" >&2; exit 2 ;;
    esac
fi
