#!/usr/bin/env bash
# Two "sites" on one machine: network namespaces ${P}a and ${P}b joined by one veth
# pair, 10.78.0.1 (site a) <-> 10.78.0.2 (site b), with a limited link: netem delay of half
# the round trip on each end and a rate limit on each end, so pushes and pulls cross a real
# TCP path with a real bandwidth-delay product. Each site runs its servers on its own
# loopback; only the gateway listens on the link address.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/xsite-link.sh COMMAND [--prefix P]

  up [--rate 800mbit] [--rtt 20ms]   make the namespaces and the link (replaces an old one)
  down                               remove them (idempotent)
  exec a|b CMD...                    run CMD in site a's or b's namespace
  addr a|b                           print a site's link address

P defaults to $PDCX_XSITE_PREFIX, else "pxs" (letters/digits, at most 8 characters).
A rate of 800mbit is 100 MB/s. Needs root, `ip netns` and tc with netem.
USAGE
}

prefix=${PDCX_XSITE_PREFIX:-pxs}
rate=800mbit rtt=20ms
cmd=${1:-}
[[ -n $cmd ]] || { usage; exit 2; }
shift
args=()
while (($#)); do
  case $1 in
    --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --rtt) rtt=${2:?--rtt needs a value}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ $prefix =~ ^[a-z0-9]{1,8}$ ]] || { echo "xsite-link.sh: bad prefix $prefix" >&2; exit 2; }
[[ $rate =~ ^[0-9]+(kbit|mbit|gbit)$ ]] || { echo "xsite-link.sh: --rate like 800mbit, got $rate" >&2; exit 2; }
[[ $rtt =~ ^[0-9]+(us|ms)$ ]] || { echo "xsite-link.sh: --rtt like 20ms, got $rtt" >&2; exit 2; }
nsa=${prefix}a nsb=${prefix}b

half() { # half of a delay like 20ms -> 10000us
  local n=${1%%[a-z]*} unit=${1##*[0-9]}
  [[ $unit == ms ]] && n=$((n * 1000))
  echo "$((n / 2))us"
}

down() {
  ip netns del "$nsa" 2>/dev/null || true
  ip netns del "$nsb" 2>/dev/null || true
}

case $cmd in
  up)
    [[ $(id -u) -eq 0 ]] || { echo "xsite-link.sh: needs root" >&2; exit 1; }
    down
    ip netns add "$nsa"
    ip netns add "$nsb"
    ip link add "${prefix}va" type veth peer name "${prefix}vb"
    ip link set "${prefix}va" netns "$nsa"
    ip link set "${prefix}vb" netns "$nsb"
    ip -n "$nsa" addr add 10.78.0.1/24 dev "${prefix}va"
    ip -n "$nsb" addr add 10.78.0.2/24 dev "${prefix}vb"
    for ns in "$nsa" "$nsb"; do ip -n "$ns" link set lo up; done
    ip -n "$nsa" link set "${prefix}va" up
    ip -n "$nsb" link set "${prefix}vb" up
    d=$(half "$rtt")
    delayed=yes
    for pair in "$nsa ${prefix}va" "$nsb ${prefix}vb"; do
      set -- $pair
      # netem does delay and rate; a kernel without sch_netem gets a token bucket (rate only).
      if ! ip netns exec "$1" tc qdisc add dev "$2" root netem delay "$d" rate "$rate" limit 100000 2>/dev/null; then
        ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency 100ms
        delayed=no
      fi
    done
    if [[ $delayed == yes ]]; then
      echo "sites up: $nsa (10.78.0.1) <-> $nsb (10.78.0.2), rate $rate each way, round trip $rtt"
    else
      echo "sites up: $nsa (10.78.0.1) <-> $nsb (10.78.0.2), rate $rate each way; NO added delay (this kernel has no sch_netem)"
    fi
    ;;
  down) down ;;
  exec)
    site=${args[0]:?exec needs a site (a or b)}
    ns=${prefix}${site}
    exec ip netns exec "$ns" "${args[@]:1}"
    ;;
  addr)
    case ${args[0]:-} in a) echo 10.78.0.1 ;; b) echo 10.78.0.2 ;; *) echo "addr a|b" >&2; exit 2 ;; esac
    ;;
  *) usage; exit 2 ;;
esac
