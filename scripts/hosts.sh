#!/usr/bin/env bash
# hosts.sh: several "hosts" on one Linux machine, for running sharc across a
# real (virtual) network: each host is a network namespace with its own
# address on a private bridge, its own hostname (a UTS namespace, entered by
# every process started on it), its own node-local disk and, on request, its
# own CPU quota (a cgroup) and network bandwidth (tc tbf on its link).
# Open MPI starts ranks on the hosts through scripts/hosts-rsh, which plays
# ssh: no sshd. docs/ARCHITECTURE.md, "Many hosts", says what this shows.
#
# As a library (tests/cli/hosts_*.sh, bench/hosts.sh):
#   source scripts/hosts.sh
#   hosts_check || { echo "SKIP: $HOSTS_WHY"; exit 0; }
#   hosts_up 2                 # node0, node1; tears down on exit (trap)
#   hosts_mpirun 2 -n 4 build/sharc train ...   # 2 slots per host
#   hosts_down                 # (also on EXIT/INT/TERM)
# As a command (root):
#   scripts/hosts.sh run N [--rate R] [--slots K] -- COMMAND...
#     brings up N hosts, runs COMMAND in node0 with HOSTFILE and MPIRUN set
#     (MPIRUN: mpirun with the flags these hosts need), then tears down.
#   scripts/hosts.sh clean   removes what earlier, killed runs left behind.
#
# Names: namespace sharc<ID>-nodeI, link sh<ID>nI (bridge side) / eth0 (in
# the host), bridge sh<ID>br, state /tmp/sharc-hosts-<ID>, cgroups
# sharc-hosts-<ID>-nodeI; <ID> is the pid of the shell that called hosts_up,
# so `hosts_clean` can tell leftovers (their shell is gone) from live sets.
# Addresses: 10.213.0.(I+1)/24, used only inside the namespaces (the bridge
# has none).

HOSTS_SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HOSTS_SUBNET=10.213.0
# TCP keepalive on Open MPI's out-of-band links (mpirun <-> each host's
# daemon): a host whose network is cut is noticed in time + intvl x probes
# seconds (~8 s here) and mpirun ends the job; Open MPI's defaults (300 +
# 20 x 9 s) leave it hanging for 8 minutes. README, "Many machines", gives the
# values to use on a cluster; tests/cli/hosts_netcut.sh checks the effect.
HOSTS_KEEPALIVE="${HOSTS_KEEPALIVE---mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3}"

_hosts_cg_v2() { # the cgroup-v2 root if it has the cpu controller
  local r
  for r in /sys/fs/cgroup /sys/fs/cgroup/unified; do
    [ -f "$r/cgroup.controllers" ] && grep -qw cpu "$r/cgroup.controllers" && { echo "$r"; return 0; }
  done
  return 1
}
_hosts_cg_v1() { [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] && echo /sys/fs/cgroup/cpu; }

# Can this machine make hosts? Sets HOSTS_WHY when not.
hosts_check() {
  HOSTS_WHY=
  if [ "$(id -u)" != 0 ]; then HOSTS_WHY="needs root (network namespaces, veth, tc)"; return 1; fi
  local t
  for t in ip tc unshare nsenter mount mpirun hostname; do
    command -v $t >/dev/null 2>&1 || { HOSTS_WHY="'$t' not found (iproute2, util-linux, openmpi-bin)"; return 1; }
  done
  local probe="sharcprobe$$" link="shq$$"
  if ! ip netns add $probe 2>/dev/null; then HOSTS_WHY="network namespaces are not permitted here (ip netns add failed)"; return 1; fi
  if ! ip link add ${link}a type veth peer name ${link}b 2>/dev/null; then
    ip netns del $probe; HOSTS_WHY="veth links are not permitted here (ip link add type veth failed)"; return 1
  fi
  ip link del ${link}a 2>/dev/null
  if ! ip netns exec $probe unshare --uts true 2>/dev/null; then
    ip netns del $probe; HOSTS_WHY="UTS namespaces are not permitted here (unshare --uts failed)"; return 1
  fi
  ip netns del $probe
  return 0
}

# Remove hosts whose creating shell is gone (a run killed before its trap ran).
hosts_clean() {
  local ns id
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^sharc[0-9]+-node[0-9]+$' || true); do
    id=${ns#sharc}; id=${id%%-*}
    [ -d /proc/$id ] && continue
    _hosts_teardown "$id"
  done
  for d in /tmp/sharc-hosts-*; do
    [ -d "$d" ] || continue
    id=${d#/tmp/sharc-hosts-}
    [[ "$id" =~ ^[0-9]+$ ]] || continue
    [ -d /proc/$id ] || _hosts_teardown "$id"
  done
}

_hosts_teardown() { # ID
  local id=$1 ns pid i cg
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^sharc${id}-node[0-9]+$" || true); do
    # processes still inside (ranks, orted) keep a namespace alive: end them first, by pid
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "sh${id}br" 2>/dev/null || true
  for i in $(seq 0 63); do ip link del "sh${id}n$i" 2>/dev/null || break; done
  for cg in /sys/fs/cgroup/cpu/sharc-hosts-$id-* /sys/fs/cgroup/sharc-hosts-$id-* /sys/fs/cgroup/unified/sharc-hosts-$id-*; do
    [ -d "$cg" ] || continue
    for pid in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    rmdir "$cg" 2>/dev/null || { sleep 0.5; rmdir "$cg" 2>/dev/null || true; }
  done
  if [ -d "/tmp/sharc-hosts-$id" ]; then
    umount -R "/tmp/sharc-hosts-$id/local" 2>/dev/null || true
    rm -rf "/tmp/sharc-hosts-$id"
  fi
}

# hosts_up N: hosts node0 .. node(N-1). Sets HOSTS_ID, HOSTS_DIR, HOSTS_N,
# HOSTS_NAMES (array), HOSTS_LOCAL (the node-local disk's path, the same path
# on every host, another directory behind it on each) and a trap that tears
# everything down when the calling shell exits.
hosts_up() {
  local n=$1 i ns
  [ "$n" -ge 1 ] && [ "$n" -le 60 ] || { echo "hosts_up: N=$n, expected 1..60" >&2; return 1; }
  hosts_clean
  HOSTS_ID=$$
  HOSTS_N=$n
  HOSTS_DIR=/tmp/sharc-hosts-$HOSTS_ID
  HOSTS_LOCAL=$HOSTS_DIR/local
  HOSTS_NAMES=()
  trap 'hosts_down' EXIT
  trap 'hosts_down; exit 130' INT
  trap 'hosts_down; exit 143' TERM
  mkdir -p "$HOSTS_DIR/local"
  echo $$ > "$HOSTS_DIR/owner"
  printf '127.0.0.1 localhost\n' > "$HOSTS_DIR/hosts"
  for i in $(seq 0 $((n - 1))); do
    printf '%s.%d node%d\n' $HOSTS_SUBNET $((i + 1)) $i >> "$HOSTS_DIR/hosts"
  done
  ip link add "sh${HOSTS_ID}br" type bridge || return 1
  ip link set "sh${HOSTS_ID}br" up || return 1
  for i in $(seq 0 $((n - 1))); do
    ns=sharc$HOSTS_ID-node$i
    HOSTS_NAMES+=(node$i)
    mkdir -p "$HOSTS_DIR/disk-node$i"
    _hosts_cgroup_make node$i
    ip netns add "$ns" || return 1
    ip link add "sh${HOSTS_ID}n$i" type veth peer name "sh${HOSTS_ID}p$i" || return 1
    ip link set "sh${HOSTS_ID}p$i" netns "$ns" || return 1
    ip -n "$ns" link set "sh${HOSTS_ID}p$i" name eth0 || return 1
    ip -n "$ns" addr add $HOSTS_SUBNET.$((i + 1))/24 dev eth0 || return 1
    ip -n "$ns" link set lo up || return 1
    ip -n "$ns" link set eth0 up || return 1
    ip link set "sh${HOSTS_ID}n$i" master "sh${HOSTS_ID}br" || return 1
    ip link set "sh${HOSTS_ID}n$i" up || return 1
  done
  export SHARC_HOSTS_ID=$HOSTS_ID
}

hosts_down() {
  [ -n "${HOSTS_ID:-}" ] || return 0
  _hosts_teardown "$HOSTS_ID"
  HOSTS_ID=
}

# hosts_hostfile SLOTS: an Open MPI hostfile naming every host with SLOTS slots.
hosts_hostfile() {
  local slots=${1:-1} f="$HOSTS_DIR/hostfile" h
  : > "$f"
  for h in "${HOSTS_NAMES[@]}"; do echo "$h slots=$slots" >> "$f"; done
  echo "$f"
}

# hosts_exec HOST COMMAND...: run COMMAND on HOST with this shell's environment
# (what a user's login shell on that host would have after `export`).
hosts_exec() {
  local h=$1; shift
  SHARC_HOSTS_KEEPENV=1 "$HOSTS_SCRIPTS/hosts-rsh" "$h" "$(printf '%q ' "$@")"
}

# The mpirun flags these hosts need: the hostfile, ssh replaced by hosts-rsh,
# TCP between hosts (shared memory inside one), no binding (every host
# believes it has all the machine's cores; ranks set train.threads).
hosts_mpirun_flags() { # SLOTS
  local f
  f=$(hosts_hostfile "${1:-1}")
  echo "--hostfile $f --mca plm_rsh_agent $HOSTS_SCRIPTS/hosts-rsh --mca btl tcp,vader,self --bind-to none" \
       "--allow-run-as-root --mca btl_base_warn_component_unused 0 --mca plm_rsh_no_tree_spawn 1" \
       "$HOSTS_KEEPALIVE"
}

# hosts_mpirun SLOTS MPIRUN-ARGS...: mpirun on node0 across the hosts, under
# `timeout ${HOSTS_TIMEOUT:-120}`.
hosts_mpirun() {
  local slots=$1; shift
  local flags
  flags=$(hosts_mpirun_flags "$slots")
  # shellcheck disable=SC2086
  hosts_exec node0 timeout "${HOSTS_TIMEOUT:-120}" mpirun $flags "$@"
}

# hosts_shape RATE: each host's link limited to RATE (tc units: 1gbit,
# 500mbit) in each direction: tbf on both ends of its veth (egress only is
# shaped by tbf; the bridge side's egress is the host's ingress).
# hosts_shape off: unlimited again.
hosts_shape() {
  local rate=$1 i ns
  for i in $(seq 0 $((HOSTS_N - 1))); do
    ns=sharc$HOSTS_ID-node$i
    tc qdisc del dev "sh${HOSTS_ID}n$i" root 2>/dev/null || true
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
    [ "$rate" = off ] && continue
    # burst: at least rate x 1 ms (tbf passes at most a burst per timer tick);
    # latency 5 ms bounds the queue as a switch port's buffer does: with 50 ms
    # of queue MPI's TCP transfers (pipelined, waiting on round trips) got half
    # the rate a plain TCP stream gets
    tc qdisc add dev "sh${HOSTS_ID}n$i" root tbf rate "$rate" burst 1mbit latency 5ms || return 1
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 1mbit latency 5ms || return 1
  done
}

# hosts_delay MS: add latency with netem where the kernel has it (sch_netem);
# returns 1 with HOSTS_WHY set where it does not.
hosts_delay() {
  local ms=$1 i
  for i in $(seq 0 $((HOSTS_N - 1))); do
    if ! tc qdisc replace dev "sh${HOSTS_ID}n$i" root netem delay "${ms}ms" 2>/dev/null; then
      HOSTS_WHY="tc netem is not available in this kernel (no sch_netem)"; return 1
    fi
  done
}

# Every host gets a CPU cgroup of its own at hosts_up (where a cgroup cpu
# controller is writable), so that processes a host starts on another
# (mpirun on node0 starting node1's daemon) leave the first one's limits.
_hosts_cgroup_make() { # HOST
  local h=$1 root cg
  if root=$(_hosts_cg_v2); then :; elif root=$(_hosts_cg_v1); then :; else return 0; fi
  cg=$root/sharc-hosts-$HOSTS_ID-$h
  mkdir -p "$cg" 2>/dev/null && echo "$cg" > "$HOSTS_DIR/cgroup-$h"
  return 0
}

# hosts_throttle HOST PERCENT: HOST's processes (those started after this)
# get PERCENT of one CPU (cgroup cpu.max, or cfs_quota_us on cgroup v1),
# over periods of 10 ms (so a step of 100 ms sees the average).
# hosts_throttle HOST off: unlimited again.
hosts_throttle() {
  local h=$1 pct=$2 cg
  [ -f "$HOSTS_DIR/cgroup-$h" ] || { HOSTS_WHY="no writable cgroup cpu controller"; return 1; }
  cg=$(cat "$HOSTS_DIR/cgroup-$h")
  if [ -f "$cg/cpu.max" ]; then
    if [ "$pct" = off ]; then echo "max 10000" > "$cg/cpu.max"; else echo "$((pct * 100)) 10000" > "$cg/cpu.max"; fi
  else
    echo 10000 > "$cg/cpu.cfs_period_us" || return 1
    if [ "$pct" = off ]; then echo -1 > "$cg/cpu.cfs_quota_us"; else echo $((pct * 100)) > "$cg/cpu.cfs_quota_us"; fi
  fi
}

# hosts_bytes HOST: "TX RX" bytes of HOST's link so far (its side: sent, received).
hosts_bytes() {
  local h=$1 i=${1#node}
  local s=/sys/class/net/sh${HOSTS_ID}n$i/statistics
  # the bridge side's rx is what the host sent
  echo "$(cat $s/rx_bytes) $(cat $s/tx_bytes)"
}

_hosts_main() {
  case "${1:-}" in
    clean) hosts_clean ;;
    run)
      shift
      local n=${1:?usage: hosts.sh run N [--rate R] [--slots K] -- COMMAND...}; shift
      local rate= slots=1
      while [ $# -gt 0 ] && [ "$1" != -- ]; do
        case "$1" in
          --rate) rate=$2; shift 2 ;;
          --slots) slots=$2; shift 2 ;;
          *) echo "hosts.sh run: unknown option '$1'" >&2; return 2 ;;
        esac
      done
      [ "${1:-}" = -- ] && shift
      [ $# -gt 0 ] || { echo "hosts.sh run: no command" >&2; return 2; }
      hosts_check || { echo "hosts.sh: $HOSTS_WHY" >&2; return 1; }
      hosts_up "$n" || return 1
      [ -z "$rate" ] || hosts_shape "$rate" || return 1
      HOSTFILE=$(hosts_hostfile "$slots") MPIRUN="mpirun $(hosts_mpirun_flags "$slots")" \
        hosts_exec node0 bash -c 'export HOSTFILE MPIRUN; exec "$@"' bash "$@"
      ;;
    *) sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; [ -n "${1:-}" ] && return 2 ;;
  esac
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  _hosts_main "$@"
fi
