#!/usr/bin/env bash
# dev/launch.sh — start N ranks of a trainer on this machine without MPI, as torchrun would:
#
#   dev/launch.sh N ./train [flags...]
#
# Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and a random
# ZT_JOB_TOKEN (unless the caller set one: the rendezvous admits only ranks that present it), and
# the ranks meet over train's TCP rendezvous (zero.h: rank 0 listens on MASTER_PORT). Their output
# goes to this terminal as it comes (each line of rank r > 0 is prefixed by the trainer itself where
# it matters: "[rank r] error: ..."). MASTER_ADDR (default 127.0.0.1) and MASTER_PORT (default 29500,
# torchrun's) may be set by the caller; run two jobs at once on different ports.
#
# The exit code is the first failing rank's (the others end on their own within -comm-timeout:
# the rendezvous tells them, or the NCCL watchdog does); 0 when every rank ends with 0. SIGINT
# (Ctrl-C), SIGTERM or SIGUSR1 to this script is passed on to every rank: each finishes its step,
# writes a checkpoint (with -o) and ends with exit code 5, which this script then returns; a second
# signal ends the ranks at once (docs/running.md "Stopping a run"). The same with torchrun:
#   torchrun --nproc-per-node N --no-python ./train [flags...]
set -u
if [ $# -lt 2 ] || ! [[ "$1" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: dev/launch.sh N ./train [flags...]   (N ranks on this machine, no MPI)" >&2
    exit 2
fi
if (( BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 501 )); then
    echo "dev/launch.sh needs bash 5.1 or later (wait -n -p); this is $BASH_VERSION" >&2
    exit 2
fi
N=$1; shift
export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} MASTER_PORT=${MASTER_PORT:-29500}
export WORLD_SIZE=$N LOCAL_WORLD_SIZE=$N
# the job's secret: only ranks that present it join the rendezvous (zero.h; docs/launch.md)
export ZT_JOB_TOKEN=${ZT_JOB_TOKEN:-$(od -An -tx8 -N16 /dev/urandom | tr -d ' \n')}
# this shell may sit inside an mpirun or srun job: its variables would make the ranks look MPI-launched
for v in $(env | grep -oE '^(OMPI|PMIX|PMI|OPAL|SLURM)_[A-Za-z0-9_]*'); do unset "$v"; done

pids=()
for ((r = 0; r < N; r++)); do
    RANK=$r LOCAL_RANK=$r "$@" &
    pids+=($!)
done
# a stop signal goes on to every rank (signalled alone, this script is all that hears it; Ctrl-C in a
# terminal reaches the ranks too, and a rank counts the two, a moment apart, as one stop)
for sig in INT TERM USR1; do trap "kill -s $sig \${pids[@]} 2>/dev/null" $sig; done

# wait for every rank, in the order they end; remember the first that failed
rc=0
left=("${pids[@]}")
while [ ${#left[@]} -gt 0 ]; do
    ended=
    wait -n -p ended "${left[@]}"
    code=$?
    if [ -z "${ended:-}" ]; then
        [ $code -gt 128 ] && continue # a trapped signal interrupted the wait: passed on, wait again
        break                         # (no child left to wait for)
    fi
    if [ $code -ne 0 ] && [ $rc -eq 0 ]; then rc=$code; fi
    rest=()
    for p in "${left[@]}"; do [ "$p" = "$ended" ] || rest+=("$p"); done
    left=("${rest[@]}")
done
exit $rc
