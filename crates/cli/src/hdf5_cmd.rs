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
    let mut child = cmd
        .spawn()
        .map_err(|e| anyhow!("running {python} -m pdcx.hdf5: {e}"))?;
    forward_signals(child.id());
    let status = child
        .wait()
        .map_err(|e| anyhow!("waiting for {python} -m pdcx.hdf5: {e}"))?;
    Ok(exit_code(status))
}

/// While the Python child runs, this process only waits for it (as system(3) does): Ctrl-C
/// reaches the child from the terminal and the child says what it left, in one line; SIGTERM
/// and SIGHUP sent to `pdcx` alone are passed on, so a killed job stops the import cleanly.
fn forward_signals(child: u32) {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
        return; // the default actions remain: the child is still stopped by the terminal's Ctrl-C
    };
    let Ok(pid) = libc::pid_t::try_from(child) else {
        return;
    };
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if sig != SIGINT {
                // SAFETY: kill(2) with a pid we spawned and a valid signal number.
                unsafe { libc::kill(pid, sig) };
            }
        }
    });
}

/// The child's exit status as this process's: its code, or 128+N when signal N ended it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(s)) => (128 + s).clamp(0, 255) as u8,
        (None, None) => 1,
    }
}
