#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing, then runs the VPIC-like demo
# against a private in-process server (no cluster, no configuration). setup.sh without flags
# installs only what the demo needs (no MPI, no S3 server: those are for `setup.sh --test`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
unset PDCX_ROOT
exec python3 examples/vpic_demo.py "$@"
