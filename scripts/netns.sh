#!/usr/bin/env bash
# Several "nodes" on one machine: one network namespace per node, all attached to one bridge,
# so a pdcx deployment (one server per node, client ranks per node) talks over a real network
# stack (veth + bridge, optionally netem delay) instead of loopback. See docs/MULTINODE.md.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/netns.sh COMMAND [--prefix P] ...

  up [--nodes K] [--subnet 10.77.0] [--delay 50us]
        bridge ${P}br (SUBNET.254/24) in the root namespace; namespaces ${P}-n0..K-1, each
        with eth0 = SUBNET.(i+1)/24 on a veth attached to the bridge, lo up; optional netem
        delay on each node's eth0 (skipped with a note when tc/netem is unavailable).
        Default K=3, no delay.
  down                  remove everything `up` made (idempotent, also after a partial up)
  exec I CMD...         run CMD in node I's namespace with PDCX_NODE=nI exported
  mpirun N MPIRUN_ARGS... PROG...
        one Open MPI job of N ranks over all nodes, ceil(N/K) consecutive ranks per node
        (rank r on node r / ceil(N/K)), each rank in its node's namespace with PDCX_NODE set;
        MPI traffic is TCP over the bridge (the shared-memory BTL is off: every namespace has
        the same host name, so its segment names would collide). Each node's Open MPI
        daemon gets its own session directory; a daemon that dies while starting, or does not
        connect back to mpirun within $PDCX_NETNS_LAUNCH_TIMEOUT s (default 30), ends the job
        with a message naming the node instead of a hang
  addr I                print node I's address
  nodes                 print the node count of a deployment that is up
  servers ROOT [--cache-mb M] [--pdcx BIN]
        one `pdcx server` per node inside its namespace (launcher env
        OMPI_COMM_WORLD_RANK=i OMPI_COMM_WORLD_SIZE=K, --bind ADDR:0 --node nI), logs in
        ROOT/logs/server-I.log; returns once ROOT/cluster.json exists and
        `pdcx server status --root ROOT` exits 0
  stop ROOT [--pdcx BIN]  `pdcx server stop --root ROOT` from the root namespace

P defaults to $PDCX_NETNS_PREFIX, else "pdcx" (letters/digits, at most 8 characters).
The pdcx binary: --pdcx, else $PDCX_BIN, else `pdcx` on PATH, else target/release/pdcx.
Needs root and `ip netns`. State of a live setup: /run/pdcx-netns/P.conf.
EOF
}

die() {
  echo "netns.sh: $*" >&2
  exit 1
}
note() { echo "netns.sh: $*" >&2; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
state_dir=/run/pdcx-netns
prefix=${PDCX_NETNS_PREFIX:-pdcx}
nodes=3 subnet=10.77.0 delay="" cache_mb="" pdcx=""
args=()

parse() {
  while (($#)); do
    case $1 in
      --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
      --nodes) nodes=${2:?--nodes needs a value}; shift 2 ;;
      --subnet) subnet=${2:?--subnet needs a value}; shift 2 ;;
      --delay) delay=${2:?--delay needs a value}; shift 2 ;;
      --cache-mb) cache_mb=${2:?--cache-mb needs a value}; shift 2 ;;
      --pdcx) pdcx=${2:?--pdcx needs a value}; shift 2 ;;
      --) shift; args+=("$@"); break ;;
      *)
        # exec I CMD..., mpirun N ARGS..., agent HOST CMD...: the rest belongs to CMD.
        if [[ $cmd == exec || $cmd == mpirun || $cmd == agent || $cmd == agent-run ]]; then args+=("$@"); break; fi
        args+=("$1"); shift ;;
    esac
  done
  [[ $prefix =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--prefix must be 1-8 lowercase letters/digits starting with a letter: $prefix"
}

need_root() {
  ((EUID == 0)) || die "must run as root (network namespaces, bridges and veths need CAP_NET_ADMIN)"
  command -v ip >/dev/null || die "the ip command (iproute2) is not installed"
  ip netns list >/dev/null 2>&1 || die "\`ip netns\` is not available here"
}

ns() { echo "$prefix-n$1"; }
conf() { echo "$state_dir/$prefix.conf"; }

load_conf() {
  [[ -f $(conf) ]] || die "no setup with prefix '$prefix' is up (run: scripts/netns.sh up --prefix $prefix)"
  # shellcheck source=/dev/null
  source "$(conf)"
}

check_index() {
  if ! [[ ${1:-} =~ ^[0-9]+$ ]] || (($1 >= nodes)); then
    die "node index must be in 0..$((nodes - 1)): ${1:-<missing>}"
  fi
}

# br_netfilter would push bridged IPv4 through iptables' FORWARD chain, where a DROP policy
# (docker sets one) silently eats node-to-node traffic. While any setup is up the bridge hooks
# are off; the last `down` restores the values saved by the first `up`.
brnf_keys=(bridge-nf-call-iptables bridge-nf-call-ip6tables bridge-nf-call-arptables)
brnf_disable() {
  local k f
  [[ -f $state_dir/brnf.saved ]] && return 0
  : >"$state_dir/brnf.saved"
  for k in "${brnf_keys[@]}"; do
    f=/proc/sys/net/bridge/$k
    [[ -w $f ]] || continue
    echo "$k=$(cat "$f")" >>"$state_dir/brnf.saved"
    if [[ $(cat "$f") != 0 ]]; then
      echo 0 >"$f" && note "set net.bridge.$k=0 while up (restored by the last down)"
    fi
  done
}
brnf_restore() {
  local k v
  [[ -f $state_dir/brnf.saved ]] || return 0
  compgen -G "$state_dir/*.conf" >/dev/null && return 0 # another setup is still up
  while IFS='=' read -r k v; do
    [[ -n $k && -w /proc/sys/net/bridge/$k ]] && echo "$v" >"/proc/sys/net/bridge/$k"
  done <"$state_dir/brnf.saved"
  rm -f "$state_dir/brnf.saved"
}

with_lock() {
  mkdir -p "$state_dir"
  exec 9>"$state_dir/lock"
  flock 9
}

cmd_down() {
  need_root
  with_lock
  local n l
  # Everything named after the prefix, whatever the state file says (a partial up has none).
  for n in $(ip netns list | awk '{print $1}'); do
    if [[ $n =~ ^$prefix-n[0-9]+$ ]]; then
      ip netns pids "$n" 2>/dev/null | xargs -r kill -9 2>/dev/null || true # stragglers only
      ip netns del "$n" 2>/dev/null || true
    fi
  done
  for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do
    if [[ $l =~ ^${prefix}v[0-9]+$ || $l == "${prefix}br" ]]; then ip link del "$l" 2>/dev/null || true; fi
  done
  rm -f "$(conf)" "$state_dir/$prefix"-*.hosts
  rm -rf "${TMPDIR:-/tmp}/pdcx-netns-$prefix"
  brnf_restore
}

cmd_up() {
  need_root
  if ! [[ $nodes =~ ^[1-9][0-9]*$ ]] || ((nodes > 250)); then die "--nodes must be in 1..250: $nodes"; fi
  [[ $subnet =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "--subnet must be three octets, e.g. 10.77.0: $subnet"
  if ip link show "${prefix}br" >/dev/null 2>&1 || [[ -f $(conf) ]]; then
    die "a setup with prefix '$prefix' is already up (scripts/netns.sh down --prefix $prefix)"
  fi
  if ip -o addr show | grep -q " inet $subnet\."; then
    die "subnet $subnet.0/24 is already in use here (pick another with --subnet)"
  fi
  with_lock
  # Written first so that `down` (also the trap below) knows what a partial up made.
  printf 'nodes=%s\nsubnet=%s\n' "$nodes" "$subnet" >"$(conf)"
  trap 'note "up failed; removing what was made"; flock -u 9; cmd_down' ERR
  brnf_disable
  ip link add "${prefix}br" type bridge
  ip addr add "$subnet.254/24" dev "${prefix}br"
  ip link set "${prefix}br" up
  local i n have_delay=1
  for ((i = 0; i < nodes; i++)); do
    n=$(ns "$i")
    ip netns add "$n"
    ip link add "${prefix}v$i" type veth peer name eth0 netns "$n"
    ip link set "${prefix}v$i" master "${prefix}br" up
    ip -n "$n" addr add "$subnet.$((i + 1))/24" dev eth0
    ip -n "$n" link set eth0 up
    ip -n "$n" link set lo up
    if [[ -n $delay && $delay != 0 ]] && ((have_delay)); then
      if ! command -v tc >/dev/null || ! tc -n "$n" qdisc add dev eth0 root netem delay "$delay" 2>/dev/null; then
        note "tc netem is not available here: no emulated delay (links are plain veths)"
        have_delay=0 delay=""
      fi
    fi
  done
  trap - ERR
  flock -u 9
  # Ports come up asynchronously: wait until every node reaches the bridge (if ping exists).
  if command -v ping >/dev/null; then
    for ((i = 0; i < nodes; i++)); do
      local t
      for t in $(seq 50); do
        ip netns exec "$(ns "$i")" ping -c1 -W1 "$subnet.254" >/dev/null 2>&1 && break
        ((t < 50)) || note "node $i does not answer pings from the bridge yet"
        sleep 0.1
      done
    done
  fi
  echo "up: $nodes nodes ($(ns 0)..$(ns $((nodes - 1))), $subnet.1..$subnet.$nodes), bridge ${prefix}br $subnet.254${delay:+, delay $delay}"
}

cmd_exec() {
  need_root
  load_conf
  check_index "${args[0]:-}"
  local i=${args[0]}
  ((${#args[@]} > 1)) || die "exec needs a command: exec I CMD..."
  mkdir -p "$(ompi_tmp "$i")"
  exec ip netns exec "$(ns "$i")" env PDCX_NODE="n$i" OMPI_MCA_orte_tmpdir_base="$(ompi_tmp "$i")" "${args[@]:1}"
}

# Each emulated node gets its own Open MPI session directory. All namespaces share /tmp and the
# host name, so without this the orteds of one job (one job family) share
# /tmp/ompi.HOST.UID/jf.N/: one orted's startup cleanup removes the directory another has just
# made, and that one exits ("A call to mkdir was unable to create the desired directory ... File
# exists") after it has daemonized, so mpirun waited forever for its callback (the hang of
# about one start in seven).
ompi_tmp() { echo "${TMPDIR:-/tmp}/pdcx-netns-$prefix/n$1"; }

# Open MPI's rsh agent (plm_rsh_agent): `agent HOST CMD...` runs the orted command line CMD in
# the namespace of the node whose address is HOST (like ssh, CMD is one shell command line).
cmd_agent() {
  load_conf
  local host=${args[0]:-} i tmp
  [[ $host == "$subnet".* ]] || die "agent: not a node address of '$prefix': $host"
  i=$((${host##*.} - 1))
  check_index "$i"
  tmp=$(ompi_tmp "$i")
  mkdir -p "$tmp"
  exec ip netns exec "$(ns "$i")" env PDCX_NODE="n$i" PDCX_NETNS_PREFIX="$prefix" OMPI_MCA_orte_tmpdir_base="$tmp" \
    bash "$repo/scripts/netns.sh" agent-run "$i" "${args[*]:1}"
}

# Inside node I's namespace: runs the orted in the foreground and watches its start. Open MPI
# asks the orteds to daemonize (no tree spawn); an orted that then dies during startup leaves
# mpirun waiting for a callback that never comes. Without --daemonize the orted stays this
# agent's child, so a failed start becomes this agent's exit status, which makes mpirun stop
# the job with an error at once. An orted that neither dies nor connects back to mpirun within
# PDCX_NETNS_LAUNCH_TIMEOUT seconds (default 30) is killed with a message saying so.
cmd_agent_run() {
  load_conf
  local i=${args[0]:-} line=${args[1]:-} timeout=${PDCX_NETNS_LAUNCH_TIMEOUT:-30} hnp pid rc deadline
  [[ -n $line ]] || die "agent-run needs a node index and a command line"
  [[ $timeout =~ ^[1-9][0-9]*$ ]] || die "PDCX_NETNS_LAUNCH_TIMEOUT must be a positive number of seconds: $timeout"
  line=${line//--daemonize/}
  # mpirun's address on the bridge (orte_hnp_uri "JOB;tcp://ADDR:PORT").
  hnp=$(grep -oE "tcp://${subnet//./\\.}\.[0-9]+:[0-9]+" <<<"$line" | head -n 1 || true)
  sh -c "exec $line" &
  pid=$!
  trap 'kill "$pid" 2>/dev/null' TERM INT HUP
  if [[ -n $hnp ]] && command -v ss >/dev/null; then
    deadline=$((${EPOCHREALTIME/./} + timeout * 1000000)) # microseconds
    until ss -Htnp state established dst "${hnp#tcp://}" 2>/dev/null | grep -q "pid=$pid,"; do
      kill -0 "$pid" 2>/dev/null || break # exited: its status is reported below
      if ((${EPOCHREALTIME/./} >= deadline)); then
        note "node $i ($(ns "$i")): the orted (pid $pid) did not connect back to mpirun at ${hnp#tcp://} within ${timeout} s; killing it (PDCX_NETNS_LAUNCH_TIMEOUT sets the limit)"
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        exit 124
      fi
      sleep 0.1
    done
  fi
  while true; do
    rc=0
    wait "$pid" || rc=$?
    # A trapped signal interrupts wait (status > 128) while the orted may still be exiting.
    kill -0 "$pid" 2>/dev/null || break
  done
  ((rc == 0)) || note "node $i ($(ns "$i")): the orted exited with status $rc"
  exit "$rc"
}

cmd_mpirun() {
  need_root
  load_conf
  local n=${args[0]:-} per i hosts
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "mpirun needs the rank count: mpirun N MPIRUN_ARGS... PROG..."
  ((${#args[@]} > 1)) || die "mpirun needs a program: mpirun N MPIRUN_ARGS... PROG..."
  per=$(((n + nodes - 1) / nodes))
  hosts=$state_dir/$prefix-$per.hosts
  for ((i = 0; i < nodes; i++)); do echo "$subnet.$((i + 1)) slots=$per"; done >"$hosts"
  export PDCX_NETNS_PREFIX=$prefix
  exec mpirun --allow-run-as-root --oversubscribe --hostfile "$hosts" --map-by slot -n "$n" \
    --mca plm_rsh_agent "$repo/scripts/netns.sh agent" --mca plm_rsh_no_tree_spawn 1 --mca routed direct \
    --mca btl self,tcp --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" \
    "${args[@]:1}"
}

cmd_addr() {
  load_conf
  check_index "${args[0]:-}"
  echo "$subnet.$((args[0] + 1))"
}

find_pdcx() {
  local c
  for c in "$pdcx" "${PDCX_BIN:-}" "$(command -v pdcx || true)" "$repo/target/release/pdcx"; do
    if [[ -n $c && -x $c ]]; then
      echo "$c"
      return
    fi
  done
  die "the pdcx binary is not built (cargo build --release -p pdcx-cli, or set PDCX_BIN)"
}

cmd_servers() {
  need_root
  load_conf
  local root=${args[0]:-}
  [[ -n $root ]] || die "servers needs the deployment root: servers ROOT"
  [[ -z $cache_mb || $cache_mb =~ ^[0-9]+$ ]] || die "--cache-mb must be an integer"
  local bin i pids=()
  bin=$(find_pdcx)
  mkdir -p "$root/logs"
  root=$(cd "$root" && pwd)
  if "$bin" server status --root "$root" >/dev/null 2>&1; then
    die "a deployment is already running at $root (scripts/netns.sh stop $root)"
  fi
  # A crashed run's cluster file would satisfy the wait below before rank 0 replaces it.
  rm -f "$root/cluster.json" "$root"/run/rank-*.json
  local extra=()
  [[ -n $cache_mb ]] && extra=(--cache-mb "$cache_mb")
  for ((i = 0; i < nodes; i++)); do
    # ip netns exec and env exec in place, so $! is the server's pid.
    ip netns exec "$(ns "$i")" env PDCX_NODE="n$i" OMPI_COMM_WORLD_RANK="$i" OMPI_COMM_WORLD_SIZE="$nodes" \
      "$bin" server --root "$root" --bind "$subnet.$((i + 1)):0" --node "n$i" "${extra[@]}" \
      </dev/null >>"$root/logs/server-$i.log" 2>&1 &
    pids+=($!)
  done
  local deadline=$((SECONDS + 120))
  until [[ -f $root/cluster.json ]] && "$bin" server status --root "$root" >/dev/null 2>&1; do
    for i in "${!pids[@]}"; do
      if ! kill -0 "${pids[i]}" 2>/dev/null; then
        tail -n 20 "$root/logs/server-$i.log" >&2 || true
        kill "${pids[@]}" 2>/dev/null || true
        die "server on node $i exited during startup (log: $root/logs/server-$i.log)"
      fi
    done
    if ((SECONDS > deadline)); then
      kill "${pids[@]}" 2>/dev/null || true
      die "servers did not come up within 120 s (logs: $root/logs)"
    fi
    sleep 0.1
  done
  echo "servers: $nodes up (pids ${pids[*]}); export PDCX_ROOT=$root"
}

cmd_stop() {
  local root=${args[0]:-}
  [[ -n $root ]] || die "stop needs the deployment root: stop ROOT"
  "$(find_pdcx)" server stop --root "$root"
}

cmd=${1:-}
(($#)) && shift
parse "$@"
case $cmd in
  up) cmd_up ;;
  down) cmd_down ;;
  exec) cmd_exec ;;
  mpirun) cmd_mpirun ;;
  agent) cmd_agent ;;
  agent-run) cmd_agent_run ;;
  addr) cmd_addr ;;
  nodes) load_conf; echo "$nodes" ;;
  servers) cmd_servers ;;
  stop) cmd_stop ;;
  -h | --help | help) usage ;;
  "") usage >&2; exit 2 ;;
  *) echo "netns.sh: unknown command: $cmd" >&2; usage >&2; exit 2 ;;
esac
