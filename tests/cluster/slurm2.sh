# A two-node Slurm cluster on the two test hosts; sourced after common.sh.
#   slurm2_up   munged on each host (one key, each its own node-local socket), slurmctld on
#               host 1, slurmd on each host, partition "two" over both nodes; waits (bounded)
#               until both nodes are idle. Sets SLURM_CONF (shared: TH_DIR/slurm/slurm.conf).
#               SLURM2_SLURMD_TIMEOUT (default 60): seconds without an answer before slurmctld
#               declares a node DOWN (a node-loss test wants it short).
# Node-local state (munge socket, slurmd spool, pid and log files, PMIx client dirs) lives
# in TH_DIR/local, which each host sees as its own TH_DIR/<host>/local. The daemons run
# inside the hosts' namespaces and are ended with them (th_down), so no stop is needed;
# the slurm client commands must run on a host too (`on "$h1" sbatch ...`): nothing
# outside the namespaces can reach the daemons.
. "$ROOT/tests/common/slurm_conf.sh"

slurm2_logs() {
    local f
    for f in "$TH_DIR"/*/local/*.log "$TH_DIR"/*/local/*.out; do
        [ -s "$f" ] || continue
        echo "---- $f (last 25 lines)"
        tail -n 25 "$f"
    done
}

slurm2_up() {
    local missing plug
    missing=$(slurm_missing_programs)
    [ -z "$missing" ] || fail "missing: $missing (make deps installs Slurm and munge)"
    plug=$(slurm_plugin_dir)
    [ -e "$plug/mpi_pmix.so" ] || fail "the Slurm PMIx plugin $plug/mpi_pmix.so is missing"
    SD=$TH_DIR/slurm
    mkdir -p "$SD/state"
    local h cpus sockets cores threads mem nodes=""
    read -r cpus sockets cores threads mem < <(on "$h1" slurmd -C 2> /dev/null | awk '
        { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
        END { print v["CPUs"], v["SocketsPerBoard"], v["CoresPerSocket"], v["ThreadsPerCore"], v["RealMemory"] }')
    [ -n "${mem:-}" ] || fail "slurmd -C did not report the node's CPUs and memory"
    cat > "$SD/slurm.conf" <<CONF
# Written by tests/cluster/slurm2.sh: two nodes, each a network namespace; not a site config.
ClusterName=mrcnntwo
SlurmctldHost=$h1(${TH_IPS[0]})
SlurmctldPort=6817
SlurmdPort=6818
$(slurm_conf_policy "$TH_DIR/local/munge.socket" | sed "s/^SlurmdTimeout=.*/SlurmdTimeout=${SLURM2_SLURMD_TIMEOUT:-60}/")
StateSaveLocation=$SD/state
SlurmdSpoolDir=$TH_DIR/local/spool
SlurmctldPidFile=$TH_DIR/local/slurmctld.pid
SlurmdPidFile=$TH_DIR/local/slurmd.pid
SlurmctldLogFile=$TH_DIR/local/slurmctld.log
SlurmdLogFile=$TH_DIR/local/slurmd.log
NodeName=$h1 NodeAddr=${TH_IPS[0]} CPUs=$cpus SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads RealMemory=$mem State=UNKNOWN
NodeName=$h2 NodeAddr=${TH_IPS[1]} CPUs=$cpus SocketsPerBoard=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads RealMemory=$mem State=UNKNOWN
PartitionName=two Nodes=$h1,$h2 Default=YES MaxTime=INFINITE State=UP
CONF
    : > "$SD/cgroup.conf"
    echo "PMIxCliTmpDirBase=$TH_DIR/local/pmix" > "$SD/mpi.conf"
    export SLURM_CONF=$SD/slurm.conf
    dd if=/dev/urandom of="$SD/munge.key" bs=1024 count=1 status=none && chmod 600 "$SD/munge.key"
    local i
    for h in "$h1" "$h2"; do
        mkdir -p "$TH_DIR/$h/local/spool" "$TH_DIR/$h/local/pmix"
        chmod 700 "$TH_DIR/$h/local"
        th_bg "$h" "$TH_DIR/$h/local/munged.out" munged --foreground --force --key-file="$SD/munge.key" \
            --socket="$TH_DIR/local/munge.socket" --pid-file="$TH_DIR/local/munged.pid" \
            --log-file="$TH_DIR/local/munged.log" --seed-file="$TH_DIR/local/munge.seed"
    done
    for h in "$h1" "$h2"; do
        for i in $(seq 100); do [ -S "$TH_DIR/$h/local/munge.socket" ] && break; sleep 0.1; done
        [ -S "$TH_DIR/$h/local/munge.socket" ] || { slurm2_logs; fail "munged did not start on $h"; }
    done
    th_bg "$h1" "$TH_DIR/$h1/local/slurmctld.out" slurmctld -D -c -f "$SLURM_CONF"
    for i in $(seq 100); do
        on "$h1" scontrol ping 2> /dev/null | grep -q UP && break
        sleep 0.2
    done
    [ "$i" -lt 100 ] || { slurm2_logs; fail "slurmctld did not answer within 20 s"; }
    for h in "$h1" "$h2"; do
        th_bg "$h" "$TH_DIR/$h/local/slurmd.out" slurmd -D -N "$h" -f "$SLURM_CONF"
    done
    local states=""
    for i in $(seq 300); do
        states=$(on "$h1" sinfo -h -N -o '%N=%T' 2> /dev/null | sort | tr '\n' ' ')
        [ "$states" = "$h1=idle $h2=idle " ] && break
        sleep 0.2
    done
    [ "$states" = "$h1=idle $h2=idle " ] || { slurm2_logs; fail "the nodes are '$states' after 60 s, not idle"; }
    echo "slurm2: two nodes idle ($states) in $(elapsed) s"
}

# Job state and exit code from scontrol (no accounting database here).
job_state() { on "$h1" scontrol show job "$1" 2> /dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
terminal() { case "$1" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) return 0 ;; esac; return 1; }
