# Shared environment for jobs/*.sbatch; sourced, not run. Every variable here can be set
# before `sbatch` (sbatch exports the submitting shell's environment by default), so a site
# adapts the jobs without editing them. See jobs/README.md.
#
# Slurm copies a batch script to its spool directory before running it, so a script cannot
# find the repository from its own path: it uses MRCNN_ROOT, else the directory `sbatch`
# was run from (SLURM_SUBMIT_DIR). Submit from the repository root or set MRCNN_ROOT.

MRCNN_ROOT=${MRCNN_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}
if [ ! -f "$MRCNN_ROOT/jobs/env.sh" ]; then
    echo "jobs/env.sh: MRCNN_ROOT=$MRCNN_ROOT is not the mrcnn repository; submit from its root or set MRCNN_ROOT" >&2
    exit 1
fi
cd "$MRCNN_ROOT" || exit 1

# ---- site setup ------------------------------------------------------------------------
# Environment modules, e.g. MRCNN_MODULES="cuda/12.4 openmpi/4.1.6 hdf5/1.14-mpi".
if [ -n "${MRCNN_MODULES:-}" ]; then
    if command -v module >/dev/null 2>&1; then
        # shellcheck disable=SC2086
        module load $MRCNN_MODULES || { echo "jobs/env.sh: module load $MRCNN_MODULES failed" >&2; exit 1; }
    else
        echo "jobs/env.sh: MRCNN_MODULES is set but this node has no 'module' command" >&2
        exit 1
    fi
fi

# The build to run: `make` builds build/release (GPU) or build/release-cpu (GPU=0).
if [ -z "${MRCNN_BUILD:-}" ]; then
    for d in build/release build/release-cpu; do
        [ -x "$d/mrcnn" ] && { MRCNN_BUILD=$d; break; }
    done
fi
MRCNN_BUILD=${MRCNN_BUILD:-build/release}
case "$MRCNN_BUILD" in /*) ;; *) MRCNN_BUILD=$MRCNN_ROOT/$MRCNN_BUILD ;; esac
if [ ! -x "$MRCNN_BUILD/mrcnn" ]; then
    echo "jobs/env.sh: no mrcnn binary in MRCNN_BUILD=$MRCNN_BUILD; run make (or set MRCNN_BUILD)" >&2
    exit 1
fi
export MRCNN_ROOT MRCNN_BUILD
export PATH=$MRCNN_BUILD:$PATH

# ---- threads -----------------------------------------------------------------------------
# One OpenMP team per rank, as wide as the CPUs Slurm gave the task; OpenBLAS single-threaded
# inside it (a threaded BLAS inside OpenMP regions oversubscribes the cores).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
export OMP_PROC_BIND=${OMP_PROC_BIND:-false}

# ---- NCCL (GPU gradients) -----------------------------------------------------------------
# NCCL_DEBUG: WARN prints only problems; INFO prints the rings/trees, the transport picked per
#   peer (P2P/NVLink, SHM, NET/IB) and the NICs: the first thing to look at when the scaling
#   benchmark is slow. Add NCCL_DEBUG_SUBSYS=INIT,NET to narrow it.
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# NCCL_IB_HCA: which InfiniBand HCAs (and ports) NCCL may use, e.g. "mlx5_0:1,mlx5_1:1" or
#   "=mlx5_0,mlx5_3" (exact names). Unset: NCCL uses every IB device it finds, which is right
#   when each GPU has its own NIC; set it when some HCAs belong to storage or are down.
[ -n "${NCCL_IB_HCA:-}" ] && export NCCL_IB_HCA
# NCCL_SOCKET_IFNAME: the IP interface for NCCL's bootstrap and its socket fallback, e.g. "ib0"
#   or "^lo,docker" (exclude). A wrong choice (a management ethernet, a docker bridge) shows
#   up as hangs at init or ~1 GB/s all-reduce. Unset: NCCL picks one.
[ -n "${NCCL_SOCKET_IFNAME:-}" ] && export NCCL_SOCKET_IFNAME
# NCCL_IB_GID_INDEX: RoCE (ethernet) fabrics need the RoCEv2 GID, usually 3; InfiniBand does not.
[ -n "${NCCL_IB_GID_INDEX:-}" ] && export NCCL_IB_GID_INDEX
# NCCL_NET_GDR_LEVEL: how far apart a GPU and NIC may be for GPUDirect RDMA (PIX, PXB, PHB,
#   SYS). Lower it if GDR through the CPU root complex is slower than staging on this board.
[ -n "${NCCL_NET_GDR_LEVEL:-}" ] && export NCCL_NET_GDR_LEVEL
# NCCL_ASYNC_ERROR_HANDLING is read by PyTorch, not by NCCL or mrcnn: mrcnn itself polls
#   ncclCommGetAsyncError while it waits and aborts the job after --comm-timeout seconds
#   (exit code 3), so a dead peer never hangs the job. It is exported only for sites whose
#   wrappers expect it; it changes nothing here.
export NCCL_ASYNC_ERROR_HANDLING=${NCCL_ASYNC_ERROR_HANDLING:-1}

# ---- Open MPI / UCX (MPI traffic: weight broadcast, loss all-reduce, CPU gradients, MPI-IO) ----
# On InfiniBand, Open MPI's UCX PML is the fast path: OMPI_MCA_pml=ucx. UCX_NET_DEVICES picks the
#   port ("mlx5_0:1"), UCX_TLS the transports ("rc,sm,self"; "dc,sm,self" scales better past a
#   few hundred ranks). Unset: Open MPI and UCX choose. On a laptop or in CI (no IB) leave them
#   unset: pml ucx without a fabric fails at MPI_Init.
[ -n "${OMPI_MCA_pml:-}" ] && export OMPI_MCA_pml
[ -n "${UCX_NET_DEVICES:-}" ] && export UCX_NET_DEVICES
[ -n "${UCX_TLS:-}" ] && export UCX_TLS
# UCX_IB_GPU_DIRECT_RDMA / UCX_MEMTYPE_CACHE: only for CUDA-aware MPI on GPU buffers; mrcnn
#   sends GPU gradients through NCCL (MPI sees host memory), so they are not needed.

# ---- launch --------------------------------------------------------------------------------
# Debian's (and most) Open MPI builds talk PMIx to srun; --mpi=pmi2 fails with them.
# --kill-on-bad-exit: one rank that dies takes the step down instead of leaving the others
# blocked in a collective until the comm timeout.
MRCNN_SRUN_MPI=${MRCNN_SRUN_MPI:-pmix}
mrcnn_srun() { srun --mpi="$MRCNN_SRUN_MPI" --kill-on-bad-exit=1 "$@"; }

mrcnn_job_banner() {
    echo "==== $(date -u '+%F %T') UTC  job ${SLURM_JOB_ID:-?} (${SLURM_JOB_NAME:-?}) restart ${SLURM_RESTART_COUNT:-0}:" \
         "${SLURM_JOB_NUM_NODES:-1} node(s) [${SLURM_JOB_NODELIST:-?}], ${SLURM_NTASKS:-1} task(s)," \
         "${SLURM_CPUS_PER_TASK:-1} CPU(s)/task, GPUs/task ${SLURM_GPUS_PER_TASK:-none}; build $MRCNN_BUILD"
}
