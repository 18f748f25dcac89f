//! The `pdcx` command's pure parsers, as a library so they can be fuzzed and tested without
//! running the binary (see `fuzz/`): `.npy` headers and `--region` arguments.

pub mod npy;
pub mod region_arg;

/// Dims as the CLI prints them: `20x4x8`.
pub fn dims_str(dims: &[u64]) -> String {
    dims.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join("x")
}
