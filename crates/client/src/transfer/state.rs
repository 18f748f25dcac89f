//! What a transfer shares with the worker that runs it: its phase and a read's result
//! (behind a lock and a condition variable its waiter sleeps on), the status the caller sees,
//! and the memory a read may land in.

use crate::shm::Payload;
use pdcx_core::Error;
use std::sync::atomic::AtomicBool;
use std::sync::{Condvar, Mutex};

#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// Created, not started yet.
    Idle,
    Pending,
    Complete,
    Failed(Error),
}

#[derive(Debug)]
pub(super) enum Phase {
    Idle,
    /// Started, small: kept here until `wait` sends it (or `status` ships it to the worker).
    Deferred,
    InFlight,
    Delivered,
    Done,
    Failed(Error),
}

pub(super) struct State {
    /// The phase, and a finished read's bytes (an arena block when they came through shared
    /// memory: handed on to the caller without another copy).
    pub(super) phase: Mutex<(Phase, Option<Payload>)>,
    pub(super) cv: Condvar,
    /// A finished read was read straight into the transfer's read target (no payload).
    pub(super) landed: AtomicBool,
}

impl State {
    pub(super) fn set(&self, phase: Phase, data: Option<Payload>) {
        let mut g = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        // A failure is final for this round; later news about it must not hide the error.
        if !matches!(g.0, Phase::Failed(_)) {
            *g = (phase, data.or(g.1.take()));
        }
        self.cv.notify_all();
    }

    /// `set` for a transfer nobody else can be waiting on (it is being waited by the calling
    /// thread, which holds it `&mut`): no wake-up, which would cost a futex syscall.
    pub(super) fn set_here(&self, phase: Phase, data: Option<Payload>) {
        let mut g = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(g.0, Phase::Failed(_)) {
            *g = (phase, data.or(g.1.take()));
        }
    }
}

/// Memory a read transfer may be read straight into (see [`Transfer::set_read_target`](super::Transfer::set_read_target)).
#[derive(Debug, Clone, Copy)]
pub(super) struct ReadTarget {
    pub(super) ptr: usize,
    pub(super) len: usize,
}
