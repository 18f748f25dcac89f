#!/usr/bin/env bash
# Builds libpdcx (release) and installs it with the PDC headers and pdcx.pc:
#   scripts/install-capi.sh [PREFIX]      (default /usr/local; or PREFIX=... in the environment)
# Then: cc prog.c $(pkg-config --cflags --libs pdcx)
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${1:-${PREFIX:-/usr/local}}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
cargo build --release -q -p pdcx-capi
target=${CARGO_TARGET_DIR:-target}
install -d "$PREFIX/lib/pkgconfig" "$PREFIX/include/pdcx"
install -m 0755 "$target/release/libpdcx.so" "$PREFIX/lib/libpdcx.so"
install -m 0644 "$target/release/libpdcx.a" "$PREFIX/lib/libpdcx.a"
install -m 0644 crates/capi/include/*.h "$PREFIX/include/pdcx/"
sed -e "s|@PREFIX@|$PREFIX|" -e "s|@VERSION@|$VERSION|" crates/capi/pdcx.pc.in >"$PREFIX/lib/pkgconfig/pdcx.pc"
if [[ $(id -u) == 0 ]] && command -v ldconfig >/dev/null; then ldconfig; fi
echo "installed libpdcx $VERSION under $PREFIX (pkg-config: $PREFIX/lib/pkgconfig/pdcx.pc)"
