#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing, then runs the VPIC-like demo
# against a private in-process server (no cluster, no configuration).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
unset PDCX_ROOT
exec python3 examples/vpic_demo.py "$@"
