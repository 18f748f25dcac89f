//! A server's memory and threads, read from /proc/PID/status.

#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Mem {
    pub(crate) rss_kb: u64,
    pub(crate) hwm_kb: u64,
    pub(crate) threads: u64,
}

pub(crate) fn mem_of(pid: u32) -> Mem {
    let mut m = Mem::default();
    if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        for line in s.lines() {
            let num = |l: &str| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            if line.starts_with("VmRSS:") {
                m.rss_kb = num(line);
            } else if line.starts_with("VmHWM:") {
                m.hwm_kb = num(line);
            } else if line.starts_with("Threads:") {
                m.threads = num(line);
            }
        }
    }
    m
}
