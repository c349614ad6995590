# What the test clusters' slurm.conf files share (sourced by tests/slurm/cluster.sh, one
# node, and tests/cluster/slurm2.sh, two netns hosts): the Slurm programs they need, the
# plugin directory, and the site policy lines. Each caller writes its own names, ports and
# paths around them.

# Prints the Slurm programs of the list that are missing (none: prints nothing).
slurm_missing_programs() {
    local p missing=""
    for p in munged slurmctld slurmd sinfo scontrol srun sbatch; do
        command -v "$p" > /dev/null 2>&1 || [ -x "/usr/sbin/$p" ] || missing="$missing $p"
    done
    echo "${missing# }"
}

slurm_plugin_dir() {
    local d
    for d in /usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib/aarch64-linux-gnu/slurm-wlm /usr/lib64/slurm /usr/lib/slurm; do
        [ -d "$d" ] && { echo "$d"; return; }
    done
    echo /usr/lib/slurm-wlm
}

# slurm.conf lines, given the munge socket ($1): auth, no cgroups, PMIx, a fast scheduler.
slurm_conf_policy() {
    cat << CONF
SlurmUser=root
SlurmdUser=root
# Our own munged, on its own socket. cred_expire=10: a requeued job waits cred_expire+1 s
# before it may start again (120 s by default, too long for a test).
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$1,cred_expire=10
# No cgroups here (containers, CI): track processes through /proc, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# Debian's Open MPI talks PMIx to srun; pmi2 does not work with it.
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Look at pending jobs every 2 s (defaults: 60 s main loop, 30 s backfill), so that a
# requeued job starts as soon as its cred_expire hold ends.
SchedulerParameters=sched_interval=2,bf_interval=2
SwitchType=switch/none
ReturnToService=2
JobRequeue=1
# Finished jobs stay visible to 'scontrol show job' long enough for the tests to read them.
MinJobAge=600
KillWait=10
InactiveLimit=0
MailProg=/bin/true
SlurmctldTimeout=30
SlurmdTimeout=60
SlurmctldDebug=info
SlurmdDebug=info
PluginDir=$(slurm_plugin_dir)
CONF
}
