#!/usr/bin/env bash
# A real, throw-away Slurm cluster on this machine's loopback addresses, for tests and docs: one munged, one
# slurmctld and N slurmd's (nodes n1..nN, node K on 127.0.0.(K+1)), all in one directory DIR, all run as root.
# Needs Debian's Slurm 22.05 and MUNGE: apt-get install --no-install-recommends slurmctld slurmd slurm-client munge
#
# Usage:
#   eval "$(scripts/slurm-local.sh start N [DIR])"   N nodes (1..99); waits until sinfo shows N idle nodes
#   scripts/slurm-local.sh run N [DIR] -- COMMAND... start, run COMMAND with the exports in its environment, and stop
#                                                    the cluster when it ends, or on Ctrl-C (the foreground group's SIGINT)
#   scripts/slurm-local.sh status [DIR]              sinfo and squeue of that cluster (exit 1 if it is not running)
#   scripts/slurm-local.sh stop [DIR]                cancel all jobs, end every process of that cluster, delete DIR;
#                                                    idempotent (exit 0 on a stopped cluster)
# DIR defaults to ${RLPLANE_SLURM_DIR:-/tmp/rlplane-slurm}. Several clusters coexist if their DIRs differ. DIR belongs
# to the cluster: start wants it new or empty (or left by an earlier start), and stop deletes it with everything in
# it, job output written there included (copy out what you need first).
#
# `start` prints ONLY export lines on stdout (everything else goes to stderr):
#   export SLURM_CONF=DIR/etc/slurm.conf          what sbatch/squeue/scontrol/sinfo/scancel read
#   export RLPLANE_SLURM_DIR=DIR
#   export RLPLANE_SLURM_PARTITION=rlplane        the one partition (the default), holding all N nodes
#   export RLPLANE_SLURM_NODES=N
#   export RLPLANE_SLURM_NODES_DIR=DIR/nodes      node nK's scratch directory is DIR/nodes/nK
# Node scratch: every task (batch script and srun tasks, even with --export=NONE) gets
# RLPLANE_NODE_SCRATCH=DIR/nodes/$SLURMD_NODENAME from a TaskProlog; a job can also compute it itself as
# "$RLPLANE_SLURM_NODES_DIR/$SLURMD_NODENAME". All nodes share this machine's hostname (`hostname` prints the same
# name on every node): tell nodes apart by SLURMD_NODENAME (n1..nN), not by hostname.
#
# Ports: a block of 100 TCP ports, slurmctld on BASE and node nK's slurmd on BASE+K. BASE is RLPLANE_SLURM_PORT if
# set (start fails if any port of the block is taken); otherwise it is derived from DIR's path
# (20000 + 100 * (cksum(DIR) % 120), i.e. 20000..31999, below Linux's ephemeral range), moving on to the next block
# while any port of the block is listening. Port choice and daemon start-up hold a flock on
# ${TMPDIR:-/tmp}/rlplane-slurm-ports.lock, so concurrent starts in different DIRs do not pick the same block.
# Other knobs: RLPLANE_SLURM_CPUS (CPUs per node, default `nproc`), RLPLANE_SLURM_MEMORY (RealMemory MB, default
# 1024), RLPLANE_SLURM_TIMEOUT (seconds to wait for idle nodes, default 30).
#
# Files under DIR: etc/ (slurm.conf, task-prolog.sh), munge/ (key, socket, munged log), state/, spool/nK/,
# run/ (pid files), log/ (slurmctld.log, slurmd-nK.log, daemons.log: look there when something fails),
# nodes/nK/ (scratch), .rlplane-slurm-local (marks DIR as this script's; stop deletes only a DIR holding it).
#
# Pitfalls met (and handled here):
# - The daemons fork into the background but inherit open file descriptors: left on the caller's stdout/stderr,
#   `$(slurm-local.sh start ...)` or a subprocess with captured output never sees EOF and hangs. Their stdio goes to
#   DIR/log/daemons.log, and the port lock's fd is closed for them (else they would hold the lock for ever).
# - slurmd does not kill running job steps when it stops: slurmstepd and the job's processes outlive it. slurmstepd
#   is hard to attribute: its command line is just "slurmstepd: [JOB.STEP]" and that title overwrites its
#   /proc/PID/environ, so neither pgrep -f DIR nor an inherited variable finds it. stop ends, precisely: processes
#   whose environment holds RLPLANE_SLURM_CLUSTER_DIR=DIR (every daemon is started with it: munged, slurmctld,
#   slurmscriptd, slurmd); processes named slurmstepd whose cwd (slurmd's chdir to DIR/log) or an open file is in
#   DIR/log (slurmstepd ignores SIGTERM: it gets SIGKILL after 2 s); job processes, also daemonized ones that left
#   the tree, whose environment has SLURM_JOB_ID and SLURM_CONF=DIR/etc/slurm.conf; and all descendants of those.
#   Never the stop's own shell, its parents or its children.
# - UNIX socket paths are limited to 107 bytes (munge socket, slurmstepd sockets in the spool dir): DIR must be
#   short (at most 64 characters here).
# - Configured CPUs must not exceed what slurmd finds, or the node drains; SlurmdParameters=config_overrides keeps
#   nodes usable when the topology slurmd detects differs from the plain CPUs=N line.
# - KillWait defaults to 30 s (SIGTERM to SIGKILL of a cancelled job); set to 5 here so stop and tests are fast.
# - A job asking for more nodes than the partition holds is accepted by sbatch and pends (reason
#   PartitionNodeLimit or PartitionConfig); it does not fail.
# - sbatch --export=NONE sets SLURM_EXPORT_ENV=NONE in the job, so its srun tasks start without PATH
#   ("execve(): bash: No such file or directory"): give absolute paths or srun --export=ALL. SLURM_CONF itself is
#   set in every task by slurmstepd.
# - `slurmctld -i` ignores saved state, and stop removes state/ anyway: job ids restart at 1 after every start.
set -euo pipefail

prog=scripts/slurm-local.sh
partition=rlplane
marker_name=.rlplane-slurm-local

say() { printf '%s: %s\n' "slurm-local" "$*" >&2; }
die() { say "$*"; exit 1; }

usage() {
  cat >&2 <<EOF
usage: $prog start N [DIR]   (prints export lines; use: eval "\$($prog start N)")
       $prog run N [DIR] -- COMMAND [ARG...]   (start, run COMMAND with the exports, stop when it ends or on Ctrl-C)
       $prog stop [DIR]
       $prog status [DIR]
DIR defaults to \${RLPLANE_SLURM_DIR:-/tmp/rlplane-slurm}
EOF
  exit 2
}

set_dir() {  # sets the global dir (not in a $(...) subshell, where set -e does not apply)
  dir=${1:-${RLPLANE_SLURM_DIR:-/tmp/rlplane-slurm}}
  [[ -n $dir ]] || die "empty DIR"
  dir=$(realpath -m -- "$dir") || die "realpath failed"
  [[ $dir != / ]] || die "refusing DIR=/"
}

# Print the pids of every process of the cluster in $dir (see header): those whose environment holds the cluster
# marker, job processes of this cluster, and all their descendants; never this shell, its ancestors or its children.
cluster_pids() {
  local conf="$dir/etc/slurm.conf" mark="RLPLANE_SLURM_CLUSTER_DIR=$dir"
  local -A parent=() hit=() skip=()
  local pid ppid f p changed=1
  while read -r pid ppid; do parent[$pid]=$ppid; done < <(ps -eo pid=,ppid=)
  p=$$
  while [[ -n $p && $p != 0 ]]; do skip[$p]=1; p=${parent[$p]:-}; done
  while read -r f; do
    [[ -n $f ]] || continue
    pid=${f#/proc/}; hit[${pid%/environ}]=1
  done < <(grep -lzxF -- "$mark" /proc/[0-9]*/environ 2>/dev/null || true)
  while read -r f; do
    [[ -n $f ]] || continue
    grep -qz '^SLURM_JOB_ID=' "$f" 2>/dev/null || continue
    pid=${f#/proc/}; hit[${pid%/environ}]=1
  done < <(grep -lzxF -- "SLURM_CONF=$conf" /proc/[0-9]*/environ 2>/dev/null || true)
  # slurmstepd writes its title over its environment: know it by its cwd (slurmd's log dir) or its slurmd log fd
  local link target
  while read -r f; do
    [[ -n $f ]] || continue
    pid=${f#/proc/}; pid=${pid%/comm}
    for link in "/proc/$pid/cwd" "/proc/$pid"/fd/*; do
      target=$(readlink "$link" 2>/dev/null) || continue
      [[ $target == "$dir/log" || $target == "$dir"/log/* ]] || continue
      hit[$pid]=1; break
    done
  done < <(grep -lx slurmstepd /proc/[0-9]*/comm 2>/dev/null || true)
  while ((changed)); do  # descendants
    changed=0
    for pid in "${!parent[@]}"; do
      [[ -z ${hit[$pid]:-} && -n ${hit[${parent[$pid]}]:-} ]] || continue
      hit[$pid]=1; changed=1
    done
  done
  for pid in "${!hit[@]}"; do
    [[ -z ${skip[$pid]:-} && -n ${parent[$pid]:-} ]] || continue
    p=${parent[$pid]}  # leave out children of this shell (our own helpers)
    while [[ -n $p && $p != 0 && $p != "$$" ]]; do p=${parent[$p]:-}; done
    [[ $p != "$$" ]] || continue
    # zombies are gone already and cannot be killed
    [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) == Z ]] || printf '%s\n' "$pid"
  done
}

# SIGTERM the given pids, wait up to $2 seconds, then SIGKILL what is left.
term_then_kill() {
  local wait_s=$1; shift
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  local i p alive
  for ((i = 0; i < wait_s * 10; i++)); do
    alive=()
    for p in "$@"; do
      if kill -0 "$p" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) != Z ]]; then alive+=("$p"); fi
    done
    ((${#alive[@]})) || return 0
    sleep 0.1
  done
  say "SIGKILL to ${alive[*]}"
  kill -KILL "${alive[@]}" 2>/dev/null || true
}

# The pid in a pid file, if that process belongs to this cluster.
pidfile_pid() {
  local f=$1 pid
  [[ -r $f ]] || return 0
  pid=$(tr -dc '0-9' <"$f")
  [[ -n $pid ]] || return 0
  if grep -qzxF -- "RLPLANE_SLURM_CLUSTER_DIR=$dir" "/proc/$pid/environ" 2>/dev/null; then printf '%s\n' "$pid"; fi
}

do_stop() {
  local conf="$dir/etc/slurm.conf" f pids=() ids
  # 1. cancel every job while slurmctld and munged still run
  if [[ -r $conf ]] && [[ -n $(pidfile_pid "$dir/run/slurmctld.pid") ]]; then
    ids=$(SLURM_CONF=$conf timeout 10 squeue -h -o %i 2>/dev/null || true)
    if [[ -n $ids ]]; then
      say "cancelling jobs: $(tr '\n' ' ' <<<"$ids")"
      # shellcheck disable=SC2086  # word splitting of the id list is wanted
      SLURM_CONF=$conf timeout 10 scancel --full $ids >&2 2>/dev/null || true
      local t0=$SECONDS  # give the jobs up to 5 s to end (they cannot when their slurmd is gone)
      while ((SECONDS - t0 < 5)); do
        [[ -z $(SLURM_CONF=$conf timeout 5 squeue -h -o %i -t R,CG,S 2>/dev/null || true) ]] && break
        sleep 0.2
      done
    fi
  fi
  # 2. slurmd's and slurmctld by pid file, then 3. whatever of the cluster is left (steps, job processes), then munged
  for f in "$dir"/run/slurmd-*.pid "$dir/run/slurmctld.pid"; do
    [[ -e $f ]] || continue
    mapfile -t -O "${#pids[@]}" pids < <(pidfile_pid "$f")
  done
  term_then_kill 5 "${pids[@]}"
  local munged_pid
  munged_pid=$(pidfile_pid "$dir/munge/munged.pid")
  mapfile -t pids < <(cluster_pids | grep -vxF -- "${munged_pid:-none}" || true)
  ((${#pids[@]} == 0)) || say "ending leftover processes: ${pids[*]}"
  term_then_kill 2 "${pids[@]}"  # slurmstepd ignores SIGTERM: no use waiting long
  [[ -z $munged_pid ]] || term_then_kill 5 "$munged_pid"
  mapfile -t pids < <(cluster_pids)
  ((${#pids[@]} == 0)) || die "processes of $dir still alive: ${pids[*]}"
  # 4. remove DIR with everything in it, but only a DIR that start set up (it holds the marker file)
  if [[ -e $dir/$marker_name ]]; then
    rm -rf -- "${dir:?}"
  fi
  return 0
}

port_in_use() {  # any listening TCP port in [$1, $2]
  ss -Htln 2>/dev/null \
    | awk -v lo="$1" -v hi="$2" '{n = split($4, a, ":"); p = a[n] + 0; if (p >= lo && p <= hi) f = 1} END {exit !f}'
}

show_logs() {
  local f
  for f in "$dir"/munge/munged.log "$dir"/log/*.log; do
    [[ -s $f ]] || continue
    say "---- last lines of $f"
    tail -n 15 "$f" >&2
  done
}

do_start() {
  local n=$1 k
  [[ $n =~ ^[0-9]+$ ]] && ((10#$n >= 1 && 10#$n <= 99)) || die "N must be a number from 1 to 99, got '$n'"
  local b missing=()
  for b in slurmctld slurmd munged mungekey sbatch squeue scontrol sinfo scancel srun; do
    command -v "$b" >/dev/null 2>&1 || [[ -x /usr/sbin/$b ]] || missing+=("$b")
  done
  ((${#missing[@]} == 0)) \
    || die "missing ${missing[*]}; install: apt-get install --no-install-recommends slurmctld slurmd slurm-client munge"
  ((${#dir} <= 64)) || die "DIR is too long for UNIX socket paths (${#dir} > 64 characters): $dir"
  local running
  running=$(cluster_pids | tr '\n' ' ')
  [[ -z $running ]] || die "a cluster already runs in $dir (pids $running); run: $prog stop $dir"
  if [[ -e $dir && ! -e $dir/$marker_name ]] && [[ -n $(ls -A -- "$dir") ]]; then
    die "$dir is not empty and was not set up by $prog (stop deletes DIR): choose a new or empty DIR"
  fi
  PATH=$PATH:/usr/sbin:/sbin

  # From here on, any failure stops what was started.
  trap 'rc=$?; if ((rc)); then say "start failed (exit $rc), stopping"; show_logs; do_stop || true; fi' EXIT
  trap 'exit 130' INT TERM

  do_stop  # deletes what an earlier, dead cluster left in DIR
  mkdir -p "$dir"
  touch "$dir/$marker_name"
  mkdir -p "$dir"/{etc,state,run,log}
  mkdir -m 755 -p "$dir/munge"  # munged wants the socket dir searchable by all; the key itself is 0600
  n=$((10#$n))
  for ((k = 1; k <= n; k++)); do mkdir -p "$dir/spool/n$k" "$dir/nodes/n$k"; done

  local lock=${TMPDIR:-/tmp}/rlplane-slurm-ports.lock
  exec 9>"$lock"
  flock -w 120 9 || die "could not lock $lock"
  local base tries=0
  if [[ -n ${RLPLANE_SLURM_PORT:-} ]]; then
    base=$RLPLANE_SLURM_PORT
    [[ $base =~ ^[0-9]+$ ]] && ((base >= 1024 && base + 99 <= 65535)) || die "RLPLANE_SLURM_PORT must be 1024..65436"
    ! port_in_use "$base" $((base + n)) || die "a port in $base..$((base + n)) is in use (RLPLANE_SLURM_PORT)"
  else
    local slot
    slot=$(($(printf '%s' "$dir" | cksum | cut -d' ' -f1) % 120))
    while base=$((20000 + 100 * slot)); port_in_use "$base" $((base + n)); do
      ((++tries < 120)) || die "no free port block in 20000..31999; set RLPLANE_SLURM_PORT"
      slot=$(((slot + 1) % 120))
    done
  fi

  local cpus=${RLPLANE_SLURM_CPUS:-$(nproc)} mem=${RLPLANE_SLURM_MEMORY:-1024}
  local conf="$dir/etc/slurm.conf"
  cat >"$dir/etc/task-prolog.sh" <<EOF
#!/bin/sh
# TaskProlog: lines "export NAME=VALUE" on stdout go into each task's environment.
echo "export RLPLANE_NODE_SCRATCH=$dir/nodes/\$SLURMD_NODENAME"
EOF
  chmod 755 "$dir/etc/task-prolog.sh"
  {
    cat <<EOF
# written by $prog start $n $dir
ClusterName=rlplane-local
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TaskProlog=$dir/etc/task-prolog.sh
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
# node nK: slurmd on 127.0.0.(K+1), port $base+K; its scratch is $dir/nodes/nK (RLPLANE_NODE_SCRATCH in tasks)
EOF
    for ((k = 1; k <= n; k++)); do
      echo "NodeName=n$k NodeHostname=localhost NodeAddr=127.0.0.$((k + 1)) Port=$((base + k))" \
        "CPUs=$cpus RealMemory=$mem State=UNKNOWN"
    done
    echo "PartitionName=$partition Nodes=n[1-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
  } >"$conf"

  local daemon_log="$dir/log/daemons.log"
  # every daemon carries the cluster marker (inherited by slurmstepd); stdio and the lock fd are not inherited
  launch() { env RLPLANE_SLURM_CLUSTER_DIR="$dir" SLURM_CONF="$conf" "$@" </dev/null >>"$daemon_log" 2>&1 9>&-; }
  mungekey -c -f -k "$dir/munge/munge.key" >>"$daemon_log" 2>&1
  chmod 600 "$dir/munge/munge.key"
  launch munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed" --force
  launch slurmctld -i -f "$conf"
  for ((k = 1; k <= n; k++)); do launch slurmd -N "n$k" -f "$conf"; done
  export SLURM_CONF=$conf

  local timeout_s=${RLPLANE_SLURM_TIMEOUT:-30} t0=$SECONDS idle=0
  while :; do
    idle=$(timeout 5 sinfo -h -N -p "$partition" -t idle -o %N 2>/dev/null | sort -u | wc -l) || idle=0
    ((idle < n)) || break
    ((SECONDS - t0 < timeout_s)) || die "only $idle of $n nodes idle after ${timeout_s} s"
    sleep 0.5
  done
  flock -u 9
  exec 9>&-
  trap - EXIT INT TERM
  say "cluster up in $dir: $n node(s) n1..n$n on 127.0.0.2..127.0.0.$((n + 1)), partition $partition," \
    "slurmctld port $base, slurmd ports $((base + 1))..$((base + n))"
  say "node scratch: \$RLPLANE_NODE_SCRATCH in every task (= \$RLPLANE_SLURM_NODES_DIR/\$SLURMD_NODENAME)"
  printf 'export SLURM_CONF=%q\n' "$conf"
  printf 'export RLPLANE_SLURM_DIR=%q\n' "$dir"
  printf 'export RLPLANE_SLURM_PARTITION=%q\n' "$partition"
  printf 'export RLPLANE_SLURM_NODES=%q\n' "$n"
  printf 'export RLPLANE_SLURM_NODES_DIR=%q\n' "$dir/nodes"
}

do_run() {  # start the cluster, run COMMAND in the foreground with its exports, stop the cluster however it ends
  local n=$1 exports status=0
  shift
  exports=$(mktemp)
  do_start "$n" >"$exports"
  trap 'do_stop; rm -f "$exports"; say "stopped $dir"' EXIT
  # Ctrl-C reaches the whole foreground process group: COMMAND handles it and ends, then bash runs these and the EXIT
  # trap (a trap waits for the foreground command), so nothing of the cluster outlives the command.
  trap 'exit 130' INT
  trap 'exit 143' TERM
  # shellcheck disable=SC1090
  set -a && . "$exports" && set +a
  "$@" || status=$?
  exit "$status"
}

do_status() {
  local conf="$dir/etc/slurm.conf"
  if [[ ! -r $conf ]] || [[ -z $(pidfile_pid "$dir/run/slurmctld.pid") ]]; then
    say "no cluster runs in $dir"
    return 1
  fi
  export SLURM_CONF=$conf
  echo "# SLURM_CONF=$conf"
  sinfo -N -l
  echo
  squeue -l
}

cmd=${1:-}
case $cmd in
  start)
    (($# >= 2 && $# <= 3)) || usage
    set_dir "${3:-}"
    do_start "$2"
    ;;
  run)
    (($# >= 3)) || usage
    n=$2
    shift 2
    if [[ $1 != -- ]]; then
      set_dir "$1"
      shift
    else
      set_dir ""
    fi
    [[ ${1:-} == -- && $# -ge 2 ]] || usage
    shift
    do_run "$n" "$@"
    ;;
  stop)
    (($# <= 2)) || usage
    set_dir "${2:-}"
    do_stop
    say "stopped $dir"
    ;;
  status)
    (($# <= 2)) || usage
    set_dir "${2:-}"
    PATH=$PATH:/usr/sbin:/sbin
    do_status
    ;;
  *) usage ;;
esac
