//! One thread and one connection per server for asynchronous transfers, running tasks in the
//! order they were submitted (so a commit queued behind its stages follows them on the wire).
//!
//! The worker knows nothing of what a task does: `transfer` gives it [`Task`]s. That keeps the
//! arrow one way: the client owns a worker slot per server without knowing transfers, and
//! transfers use the client.

use crate::conn::Conn;
use std::sync::{mpsc, Mutex};

/// A unit of work for a server's worker thread.
pub(crate) trait Task: Send {
    /// Runs on the worker thread with its connection (`None` until the first task opens it).
    fn run(self: Box<Self>, conn: &mut Option<Conn>);
    /// The worker has stopped and will never run this task: fail whoever waits for it.
    fn abandon(self: Box<Self>);
}

/// Owns one connection to one server and executes tasks in submission order.
pub(crate) struct Worker {
    tx: Mutex<mpsc::Sender<Box<dyn Task>>>,
}

impl Worker {
    /// Starts the thread `name`; it ends when the worker is dropped.
    pub(crate) fn spawn(name: String) -> Worker {
        let (tx, rx) = mpsc::channel::<Box<dyn Task>>();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                let mut conn: Option<Conn> = None;
                for task in rx {
                    task.run(&mut conn);
                }
            })
            .expect("spawning a transfer worker thread");
        Worker { tx: Mutex::new(tx) }
    }

    /// Queues `task`; if the thread has stopped, the task is abandoned.
    pub(crate) fn submit(&self, task: Box<dyn Task>) {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(mpsc::SendError(task)) = tx.send(task) {
            task.abandon();
        }
    }
}
