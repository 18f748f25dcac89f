//! `pdcx import` / `pdcx export` of HDF5 files, handed to the Python module `pdcx.hdf5`.

use crate::absolute;
use anyhow::{anyhow, bail, Result};
use std::path::Path;

/// `pdcx import` / `pdcx export`: the HDF5 work is done by the HDF5 library through h5py, in
/// the Python module `pdcx.hdf5` (the interpreter: `PDCX_PYTHON`, else `python3`), which
/// gets the arguments as they are and the root when one was given.
pub fn run(what: &str, root: Option<&Path>, args: &[String]) -> Result<u8> {
    let python = pdcx_core::config::PYTHON
        .text()
        .unwrap_or_else(|| pdcx_core::config::PYTHON.default.to_string());
    let check = std::process::Command::new(&python)
        .args(["-c", "import pdcx.hdf5, h5py"])
        .output()
        .map_err(|e| {
            anyhow!("pdcx {what} runs {python} (set PDCX_PYTHON to another interpreter): {e}")
        })?;
    if !check.status.success() {
        bail!(
            "pdcx {what} needs the pdcx Python package and h5py in {python} \
             (pip install 'pdcx[hdf5]', or scripts/setup.sh --test): {}",
            String::from_utf8_lossy(&check.stderr)
                .trim()
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    let mut cmd = std::process::Command::new(&python);
    cmd.args(["-m", "pdcx.hdf5", what]);
    if let Some(r) = root {
        cmd.arg("--root").arg(absolute(r)?);
    }
    cmd.args(args);
    let status = cmd
        .status()
        .map_err(|e| anyhow!("running {python} -m pdcx.hdf5: {e}"))?;
    Ok(status.code().map_or(1, |c| c.clamp(0, 255) as u8))
}
