//! Processes by pid: whether one is alive (a zombie is not), signals, and stopping one with
//! SIGTERM, then SIGKILL.

use std::time::{Duration, Instant};

pub(super) fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence.
    let exists = unsafe { libc::kill(p, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    // A zombie has exited; whoever should reap it has not yet.
    exists && !is_zombie(pid)
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

pub(super) fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(p) = libc::pid_t::try_from(pid) {
        if p > 0 {
            // SAFETY: plain kill(2) on a pid verified to be one of our servers.
            unsafe { libc::kill(p, sig) };
        }
    }
}

/// SIGTERM, 5 s grace, then SIGKILL. Returns what happened.
pub(super) fn force_stop(pid: u32) -> String {
    signal(pid, libc::SIGTERM);
    if wait_gone(pid, Duration::from_secs(5)) {
        return "stopped after SIGTERM (did not exit on request in time)".into();
    }
    signal(pid, libc::SIGKILL);
    if wait_gone(pid, Duration::from_secs(5)) {
        "KILLED with SIGKILL (unsynced data is lost; committed data survives)".into()
    } else {
        format!("STILL RUNNING after SIGKILL (pid {pid})")
    }
}

fn wait_gone(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !pid_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !pid_alive(pid)
}
