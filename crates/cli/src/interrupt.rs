//! Ctrl-C (and SIGTERM/SIGHUP) during a copy: the half-written temporary is removed, one line
//! is printed, and the process exits 128+signal, so nothing partial is ever left under a name
//! the user asked for and no traceback or panic reaches the terminal.
//!
//! The signal is taken on a thread of its own (signal-hook's iterator), not in a handler, so
//! the cleanup may do anything a thread may, including asking the servers to delete a temporary
//! object. The copy registers what it is writing with [`arm`]; publishing under the final name
//! happens inside [`Armed::publish`], under the same lock the signal thread takes, so a signal
//! sees either "temporary still pending" (and removes it) or "published" (and leaves it).

use pdcx_client::Client;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, Once};

/// A temporary that must not outlive an interruption.
pub enum Temporary {
    /// A local file written before its rename.
    Local(PathBuf),
    /// A `pdcx://` file written before its rename.
    Pdcx { client: Client, name: String },
}

/// What is being written now, and the name the user gave (for the message).
struct Pending {
    temp: Temporary,
    shown: String,
}

static PENDING: Mutex<Option<Pending>> = Mutex::new(None);
static INSTALL: Once = Once::new();

fn pending() -> MutexGuard<'static, Option<Pending>> {
    // A panic while holding the lock leaves the state as it was: still usable.
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the signal thread (once per process). `what` names the command in the message.
pub fn install(what: &'static str) {
    INSTALL.call_once(|| {
        let mut signals = match Signals::new([SIGINT, SIGTERM, SIGHUP]) {
            Ok(s) => s,
            Err(e) => {
                // Without the thread, the default action still stops the copy; only the
                // cleanup of the temporary is lost, and it never has a final name.
                eprintln!("pdcx {what}: cannot watch for Ctrl-C ({e}); continuing");
                return;
            }
        };
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                // The lock is held until the process exits: the copy, whose next write fails
                // once its temporary is gone, then blocks in `Armed`'s drop instead of
                // reporting that failure and exiting 1 before this thread exits 128+signal.
                let mut slot = pending();
                let note = match slot.take() {
                    Some(p) => {
                        remove(p.temp);
                        format!("; {} was not written", p.shown)
                    }
                    None => String::new(),
                };
                eprintln!("pdcx {what}: interrupted{note}");
                std::process::exit(128 + sig);
            }
        });
    });
}

fn remove(temp: Temporary) {
    match temp {
        Temporary::Local(p) => {
            let _ = std::fs::remove_file(p);
        }
        Temporary::Pdcx { client, name } => {
            let _ = client.file_remove(&name);
        }
    }
}

/// Registers `temp` as the copy's pending temporary until [`Armed::publish`] or drop.
pub fn arm(temp: Temporary, shown: String) -> Armed {
    *pending() = Some(Pending { temp, shown });
    Armed(())
}

/// A pending temporary; dropping it (on an error) removes the temporary.
pub struct Armed(());

impl Armed {
    /// Runs `publish` (the rename to the final name) with signals held off, then forgets the
    /// temporary. On failure the temporary is removed.
    pub fn publish<T, E>(self, publish: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let mut slot = pending();
        let r = publish();
        let p = slot.take();
        drop(slot);
        if r.is_err() {
            if let Some(p) = p {
                remove(p.temp);
            }
        }
        std::mem::forget(self);
        r
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if let Some(p) = pending().take() {
            remove(p.temp);
        }
    }
}
