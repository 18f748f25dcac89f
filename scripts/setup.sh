#!/usr/bin/env bash
# Installs what pdcx needs on a fresh Debian machine (run as root). Idempotent: each step
# checks first, so a second run takes seconds.
#   scripts/setup.sh           what the demo (scripts/demo.sh) needs: libzfp, numpy, maturin;
#                              builds and installs the Python package and the `pdcx` command
#   scripts/setup.sh --test    also what only the tests need (scripts/test.sh): OpenMPI +
#                              mpi4py, pytest, ruff, xarray, dask, netCDF4, boto3, iproute2, h5py +
#                              hdf5plugin (ZFP) and h5dump with Debian's H5Z-ZFP plugin, the
#                              C API (libpdcx) and versitygw, the S3 server the S3 tier's
#                              tests start (a Go build, 1-7 minutes on 2 cores), Montage,
#                              CFITSIO's utilities and astropy (the judges of the file API)
#   scripts/setup.sh --bench   also what bench/ needs: OpenMPI + mpi4py, libpdcx, parallel h5py
#                              (for the HDF5 baselines) and fio
# The flags combine (`--test --bench`). The demo uses an embedded server and no MPI, so the
# default stays small: a first run of the demo does not wait for an S3 server it never starts.
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0 want_bench=0
for a in "$@"; do
  case $a in
    --test) want_test=1 ;;
    --bench) want_bench=1 ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown argument $a (try --help)" >&2; exit 2 ;;
  esac
done
want_mpi=$((want_test || want_bench))

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# libzfp: the codec crate links it (the Python package and the CLI both include the codecs).
apt_pkgs=(libzfp-dev pkg-config)
((want_mpi)) && apt_pkgs+=(openmpi-bin libopenmpi-dev)
# hdf5-filter-plugin-zfp-serial: H5Z-ZFP for h5dump (serial libhdf5), which tests/test_hdf5.py
# uses to check that ZFP chunks and exported files are standard HDF5. fio: bench/seqbw.sh's
# device figure (tests/test_bench_tools.py runs it).
((want_test)) && apt_pkgs+=(iproute2 curl hdf5-tools libhdf5-openmpi-dev hdf5-filter-plugin-zfp-serial fio)
# montage + libcfitsio-bin (fitscopy): unmodified CFITSIO programs that tests/test_montage.py
# and bench/montage run on pdcx:// files.
((want_test || want_bench)) && apt_pkgs+=(montage libcfitsio-bin)
((want_bench)) && apt_pkgs+=(libhdf5-openmpi-dev fio)
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
py_mods=(numpy maturin)
((want_mpi)) && py_mods+=(mpi4py)
# xarray and dask: tests/test_xarray.py (pdcx's xarray backend; dask's array extra is numpy).
# boto3: tests/test_mpiio.py reads the objects an S3 home received with it.
# netCDF4: the reference backend xarray's own round-trip suite (tests/test_xarray_suite.py) is
# compared with; xarray's suite also reads netCDF files with it.
((want_test)) && py_mods+=(pytest ruff xarray dask boto3 netCDF4)
# astropy: the synthetic sky images of tests/test_montage.py and bench/montage.
((want_test || want_bench)) && py_mods+=(astropy)
py_need=()
for m in "${py_mods[@]}"; do
  $PY -c "import $m" 2>/dev/null || py_need+=("$m")
done
if ((${#py_need[@]})); then
  log "pip install ${py_need[*]}"
  $PY -m pip install -q "${py_need[@]}"
fi

# --test too: tests/test_mpiio.py runs h5py's `mpio` driver under `pdcx run`.
if ((want_bench || want_test)) && ! $PY -c 'import h5py,sys; sys.exit(0 if h5py.get_config().mpi else 1)' 2>/dev/null; then
  log "building parallel h5py against Debian's libhdf5-openmpi (about 3 minutes)"
  $PY -m pip install -q -U Cython pkgconfig "setuptools>=77" wheel
  $PY -m pip uninstall -y -q h5py >/dev/null 2>&1 || true
  # H5PY_SETUP_REQUIRES=0 keeps it from compiling its own mpi4py (which needs >20 GB of RAM).
  ( ulimit -v 16000000
    H5PY_SETUP_REQUIRES=0 CC=mpicc HDF5_MPI=ON HDF5_PKGCONFIG_NAME=hdf5-openmpi \
      $PY -m pip install -q --no-build-isolation --no-binary=h5py h5py )
fi

# hdf5plugin: the ZFP (H5Z-ZFP), LZ4, Blosc, Zstd filters for h5py, used by pdcx.hdf5 to read such
# chunks and by tests/test_hdf5.py to write them. Debian's ZFP plugin is built for the serial
# libhdf5 and cannot load into the parallel h5py above. --no-deps: keep that h5py.
if ((want_test)) && ! $PY -c 'import hdf5plugin' 2>/dev/null; then
  log "pip install hdf5plugin"
  $PY -m pip install -q --no-deps hdf5plugin
fi

# A real S3 server (versitygw) for the S3 tier's tests and bench/s3; built once with Go.
if ((want_test)) && [[ ! -x /usr/local/bin/versitygw ]]; then
  log "building versitygw, the S3 server the tests use (1-7 minutes on 2 cores)"
  bash scripts/s3server.sh install
fi

if [[ -f Cargo.toml ]]; then
  target=${CARGO_TARGET_DIR:-target}
  log "building pdcx, libpdcx_mpiio and libpdcx_fits (release)"
  cargo build --release -q -p pdcx-cli -p pdcx-mpiio -p pdcx-fits
  install -m 0755 "$target/release/pdcx" /usr/local/bin/pdcx
  # `pdcx run` and `pdcx fits` find the preload libraries in ../lib of the pdcx binary.
  install -D -m 0755 "$target/release/libpdcx_mpiio.so" /usr/local/lib/libpdcx_mpiio.so
  install -D -m 0755 "$target/release/libpdcx_fits.so" /usr/local/lib/libpdcx_fits.so
  log "building and installing the Python package"
  rm -rf "$target/wheels"
  # --auditwheel skip: the module links system libraries (libzfp) that a local install keeps;
  # a manylinux repair would need patchelf and bundle copies of them.
  $PY -m maturin build --release -q -m crates/python/Cargo.toml --auditwheel skip -o "$target/wheels" 2>&1 | grep -v '^📦\|^🍹\|^🔗\|^🐍' || true
  $PY -m pip install -q --force-reinstall --no-deps "$target"/wheels/pdcx-*.whl
  if ((want_mpi)); then
    log "building and installing libpdcx (C API) under /usr/local"
    bash scripts/install-capi.sh /usr/local >/dev/null
  fi
fi
log "done"
