//! Lustre striping for the shared-directory tier (PDC, Tang et al., "Toward Scalable and
//! Asynchronous Object-centric Data Management for HPC", §III "Automatic Lustre Tuning"):
//! use as many OSTs as possible for concurrent access and have each OST accessed by as few
//! writers as possible.
//!
//! ```text
//! StripeCount = ⌊N_ost / N_writer⌋            (at least 1, at most N_ost)
//! StripeSize  = 1 MiB if data size < 1 GiB, else 16 MiB
//! OSTIndex_r  = (Rank × StripeCount) % N_ost
//! ```
//!
//! [`policy`] is that formula; [`apply`] sets a layout with `lfs setstripe` when the path is on
//! Lustre and does nothing elsewhere, so the same code runs on laptops, CI and Lustre.

use pdcx_core::{Error, ErrorKind, Result};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

/// `f_type` of a Lustre client mount in `statfs(2)` (LL_SUPER_MAGIC).
pub const LUSTRE_SUPER_MAGIC: u64 = 0x0BD0_0BD0;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A Lustre layout: `lfs setstripe -c count -S size -i offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stripe {
    /// Number of OSTs a file is spread over.
    pub count: u32,
    /// Bytes written to one OST before moving to the next.
    pub size: u64,
    /// Index of the first OST.
    pub offset: u32,
}

/// The paper's policy for `writers` servers writing `bytes` each, for server `rank`, on a file
/// system with `osts` OSTs. Zero OSTs or writers are treated as one (a degenerate call must
/// still give a valid layout).
pub fn policy(osts: u32, writers: u32, bytes: u64, rank: u32) -> Stripe {
    let osts = osts.max(1);
    let writers = writers.max(1);
    let count = (osts / writers).clamp(1, osts);
    let size = if bytes < GIB { MIB } else { 16 * MIB };
    // Equation (3): consecutive ranks get consecutive, disjoint groups of `count` OSTs, which
    // is what keeps each OST to as few writers as possible (rank % osts alone would make the
    // groups of neighbouring ranks overlap whenever count > 1). For count = 1 both agree.
    let offset = ((u64::from(rank) * u64::from(count)) % u64::from(osts)) as u32;
    Stripe {
        count,
        size,
        offset,
    }
}

/// The `lfs` arguments that set `stripe` on `path`.
pub fn setstripe_args(stripe: &Stripe, path: &Path) -> Vec<std::ffi::OsString> {
    let size = if stripe.size.is_multiple_of(MIB) {
        format!("{}M", stripe.size / MIB)
    } else {
        stripe.size.to_string()
    };
    vec![
        "setstripe".into(),
        "-c".into(),
        stripe.count.to_string().into(),
        "-S".into(),
        size.into(),
        "-i".into(),
        stripe.offset.to_string().into(),
        path.as_os_str().to_owned(),
    ]
}

/// The file system type of `path` (of its parent if `path` does not exist yet).
pub fn fs_type(path: &Path) -> Result<u64> {
    let probe = if path.exists() {
        path
    } else {
        path.parent().unwrap_or(path)
    };
    let c = CString::new(probe.as_os_str().as_bytes())
        .map_err(|_| Error::invalid(format!("path {} contains a NUL byte", probe.display())))?;
    // SAFETY: `c` is a valid NUL-terminated string and `buf` a properly sized out-parameter.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut buf) } != 0 {
        return Err(Error::io(
            &format!("statfs {}", probe.display()),
            &std::io::Error::last_os_error(),
        ));
    }
    // f_type is a signed word on some targets; the magic numbers are defined as unsigned.
    #[allow(clippy::unnecessary_cast)]
    Ok(buf.f_type as u64 & 0xFFFF_FFFF)
}

pub fn is_lustre(path: &Path) -> Result<bool> {
    Ok(fs_type(path)? == LUSTRE_SUPER_MAGIC)
}

/// Sets `stripe` on `path` (a directory: files created in it inherit the layout; or a file
/// that does not exist yet: `lfs` creates it empty with that layout). On anything but Lustre
/// this is a no-op, logged at debug level.
pub fn apply(path: &Path, stripe: &Stripe) -> Result<()> {
    if !is_lustre(path)? {
        tracing::debug!(path = %path.display(), "not Lustre: striping is a no-op");
        return Ok(());
    }
    run_lfs(Path::new("lfs"), &setstripe_args(stripe, path))
}

/// Runs `lfs` with `args`; a failure carries lfs's own message.
pub fn run_lfs(lfs: &Path, args: &[std::ffi::OsString]) -> Result<()> {
    let show = || {
        let mut s = lfs.display().to_string();
        for a in args {
            s.push(' ');
            s.push_str(&a.to_string_lossy());
        }
        s
    };
    let out = Command::new(lfs)
        .args(args)
        .output()
        .map_err(|e| Error::io(&format!("running {}", show()), &e))?;
    if !out.status.success() {
        return Err(Error::new(
            ErrorKind::Io,
            format!(
                "{} failed ({}): {}",
                show(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(())
}

/// Number of OSTs of the Lustre file system holding `path`, from `lfs osts PATH` (one line
/// `N: fsname-OSTxxxx_UUID ACTIVE` per OST).
pub fn ost_count(path: &Path) -> Result<u32> {
    let out = Command::new("lfs")
        .arg("osts")
        .arg(path)
        .output()
        .map_err(|e| Error::io("running lfs osts", &e))?;
    if !out.status.success() {
        return Err(Error::new(
            ErrorKind::Io,
            format!(
                "lfs osts {} failed: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    match parse_osts(&String::from_utf8_lossy(&out.stdout)) {
        0 => Err(Error::new(
            ErrorKind::Io,
            format!("lfs osts {} listed no OSTs", path.display()),
        )),
        n => Ok(n),
    }
}

/// Counts the `N: NAME ...` lines of `lfs osts` output.
pub fn parse_osts(text: &str) -> u32 {
    text.lines()
        .filter(|l| {
            let l = l.trim_start();
            l.split_once(':').is_some_and(|(idx, rest)| {
                !idx.is_empty() && idx.bytes().all(|b| b.is_ascii_digit()) && rest.contains("OST")
            })
        })
        .count() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_cases() {
        // Perlmutter-like: 248 OSTs. One writer gets every OST.
        assert_eq!(
            policy(248, 1, 100 * MIB, 0),
            Stripe {
                count: 248,
                size: MIB,
                offset: 0
            }
        );
        // 8 writers on 248 OSTs: 31 OSTs each, disjoint groups.
        assert_eq!(policy(248, 8, 100 * MIB, 0).count, 31);
        assert_eq!(policy(248, 8, 100 * MIB, 1).offset, 31);
        assert_eq!(policy(248, 8, 100 * MIB, 7).offset, 217);
        // More writers than OSTs: one OST each, round-robin by rank.
        let s = policy(248, 1024, 100 * MIB, 300);
        assert_eq!((s.count, s.offset), (1, 300 % 248));
        // Stripe size switches at 1 GiB of data.
        assert_eq!(policy(248, 8, GIB - 1, 0).size, MIB);
        assert_eq!(policy(248, 8, GIB, 0).size, 16 * MIB);
        assert_eq!(policy(248, 8, 512 * GIB, 0).size, 16 * MIB);
    }

    #[test]
    fn groups_of_neighbouring_ranks_do_not_overlap() {
        let (osts, writers) = (16, 4);
        let mut used = vec![0; osts as usize];
        for rank in 0..writers {
            let s = policy(osts, writers, 0, rank);
            for i in 0..s.count {
                used[((s.offset + i) % osts) as usize] += 1;
            }
        }
        assert!(used.iter().all(|&n| n == 1), "{used:?}");
    }

    #[test]
    fn degenerate_inputs_still_give_a_layout() {
        assert_eq!(
            policy(0, 0, 0, 5),
            Stripe {
                count: 1,
                size: MIB,
                offset: 0
            }
        );
        let s = policy(4, 3, 0, u32::MAX);
        assert!(s.count == 1 && s.offset < 4);
    }

    #[test]
    fn lfs_arguments() {
        let args = setstripe_args(
            &Stripe {
                count: 4,
                size: 16 * MIB,
                offset: 7,
            },
            Path::new("/lustre/x"),
        );
        let args: Vec<_> = args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            args,
            ["setstripe", "-c", "4", "-S", "16M", "-i", "7", "/lustre/x"]
        );
    }

    #[test]
    fn not_lustre_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_lustre(dir.path()).unwrap());
        apply(dir.path(), &policy(8, 2, 0, 1)).unwrap();
        // A file that does not exist yet is probed through its directory.
        apply(&dir.path().join("new-file"), &policy(8, 2, 0, 1)).unwrap();
        assert!(!dir.path().join("new-file").exists());
    }

    #[test]
    fn lfs_failures_carry_its_message() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("lfs");
        std::fs::write(
            &fake,
            "echo \"$@\" > \"$0.args\"\necho 'no such OST' >&2\nexit 1\n",
        )
        .unwrap();
        let stripe = policy(8, 2, 0, 1);
        // Run through sh rather than exec'ing a file this process just wrote (ETXTBSY races
        // with forks from other test threads).
        let mut args = vec![fake.clone().into_os_string()];
        args.extend(setstripe_args(&stripe, Path::new("/l/d")));
        let err = run_lfs(Path::new("/bin/sh"), &args).unwrap_err();
        assert!(err.message.contains("no such OST"), "{}", err.message);
        let args = std::fs::read_to_string(dir.path().join("lfs.args")).unwrap();
        assert_eq!(args.trim(), "setstripe -c 4 -S 1M -i 4 /l/d");
    }

    #[test]
    fn counts_osts() {
        let text = "OBDS:\n0: scratch-OST0000_UUID ACTIVE\n1: scratch-OST0001_UUID ACTIVE\n\
                    2: scratch-OST0002_UUID INACTIVE\n";
        assert_eq!(parse_osts(text), 3);
        assert_eq!(parse_osts("OBDS:\n"), 0);
    }
}
