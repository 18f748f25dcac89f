#!/usr/bin/env bash
# A real S3-compatible server for tests and benchmarks: versitygw (Versity S3 Gateway, posix
# backend; one process, one port, starts in a fraction of a second).
#
#   scripts/s3server.sh install          build it with Go into /usr/local/bin (skipped if there)
#   scripts/s3server.sh start DIR        serve DIR on 127.0.0.1:<free port> with fresh credentials,
#                                        create a bucket, print shell lines to eval:
#                                          PDCX_TEST_S3_ENDPOINT=http://127.0.0.1:P
#                                          PDCX_TEST_S3_BUCKET=pdcx-test
#                                          PDCX_TEST_S3_ACCESS_KEY_ID=...  PDCX_TEST_S3_SECRET_ACCESS_KEY=...
#                                          PDCX_TEST_S3_PIDFILE=DIR/versitygw.pid
#   scripts/s3server.sh stop DIR|PIDFILE kill that server by its PID (never by name)
#
# Why versitygw and not MinIO: it builds in about half the time (SETUP-NOTES: 75 s vs 160 s on
# 2 cores), opens a single port and starts in ~0.1 s. It binds to all interfaces unless told
# otherwise, so we always pass 127.0.0.1.
set -euo pipefail

VERSION=v1.8.0
MODULE=github.com/versity/versitygw/cmd/versitygw
BIN=${VERSITYGW:-/usr/local/bin/versitygw}
GO=${GO:-/usr/local/go/bin/go}
BUCKET=${PDCX_TEST_S3_BUCKET:-pdcx-test}

die() { echo "s3server: $*" >&2; exit 1; }

install_server() {
  if [[ -x $BIN ]]; then return 0; fi
  [[ -x $GO ]] || GO=$(command -v go) || die "Go is needed to build versitygw (looked at /usr/local/go/bin/go and PATH)"
  echo "s3server: building versitygw $VERSION with $("$GO" version | cut -d' ' -f3) (a few minutes on 2 cores)" >&2
  local gobin start
  gobin=$(mktemp -d)
  start=$(date +%s)
  # GOFLAGS=-mod=mod: module mode even if the caller's directory has a vendor tree.
  GOBIN=$gobin GOFLAGS=-mod=mod "$GO" install "$MODULE@$VERSION" >&2
  install -m 0755 "$gobin/versitygw" "$BIN"
  rm -rf "$gobin"
  echo "s3server: installed $BIN in $(( $(date +%s) - start )) s" >&2
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

rand_hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# Signed S3 request with curl's built-in SigV4 (no AWS CLI needed). Prints the HTTP status.
s3_curl() { # METHOD URL ACCESS SECRET
  # versitygw insists on x-amz-content-sha256, which curl 7.88 does not add by itself.
  curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X "$1" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' --aws-sigv4 "aws:amz:us-east-1:s3" --user "$3:$4" "$2" || echo 000
}

start_server() {
  local dir=${1:?usage: s3server.sh start DIR}
  [[ -x $BIN ]] || die "$BIN is missing: run scripts/s3server.sh install"
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)
  local access secret port pid endpoint status i
  access=pdcx$(rand_hex 8)
  secret=$(rand_hex 20)
  # A free port can be taken between probing and binding; retry a few times.
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    endpoint=http://127.0.0.1:$port
    # setsid: its own process group, so a Ctrl-C in the caller's terminal does not reach it.
    # --keep-alive: versitygw closes every connection after one request unless asked not to.
    # Credentials through the environment, not argv, so `ps` does not show them.
    ROOT_ACCESS_KEY_ID=$access ROOT_SECRET_ACCESS_KEY=$secret setsid "$BIN" --port "127.0.0.1:$port" \
      --keep-alive --quiet posix "$dir/data" >"$dir/versitygw.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$dir/versitygw.pid"
    for i in $(seq 1 100); do # up to 10 s
      kill -0 "$pid" 2>/dev/null || break
      status=$(s3_curl GET "$endpoint/" "$access" "$secret")
      [[ $status == 200 ]] && break 2
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    echo "s3server: attempt $attempt on port $port failed: $(tail -3 "$dir/versitygw.log")" >&2
  done
  [[ ${status:-} == 200 ]] || die "versitygw did not answer; log: $dir/versitygw.log"
  status=$(s3_curl PUT "$endpoint/$BUCKET" "$access" "$secret")
  [[ $status == 200 ]] || { kill "$pid"; die "creating bucket $BUCKET: HTTP $status"; }
  cat <<EOF
PDCX_TEST_S3_ENDPOINT=$endpoint
PDCX_TEST_S3_BUCKET=$BUCKET
PDCX_TEST_S3_ACCESS_KEY_ID=$access
PDCX_TEST_S3_SECRET_ACCESS_KEY=$secret
PDCX_TEST_S3_PIDFILE=$dir/versitygw.pid
EOF
}

stop_server() {
  local target=${1:?usage: s3server.sh stop DIR|PIDFILE}
  local pidfile=$target
  [[ -d $target ]] && pidfile=$target/versitygw.pid
  [[ -f $pidfile ]] || die "no pid file at $pidfile"
  local pid
  pid=$(cat "$pidfile")
  # Only kill it if that PID is still a versitygw (PIDs are reused).
  if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q versitygw; then
    kill "$pid"
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

case "${1:-}" in
  install) install_server ;;
  start) shift; start_server "$@" ;;
  stop) shift; stop_server "$@" ;;
  *) die "usage: s3server.sh install | start DIR | stop DIR|PIDFILE" ;;
esac
