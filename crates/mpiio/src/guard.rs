//! The recursion guard: while this thread runs pdcx's own code (the client opens sockets,
//! files and threads, writes to them, prints), every wrapper passes straight through.
//!
//! The depth is a `const`-initialised thread local without a destructor: reading it needs no
//! lazy initialisation and no allocation, so it is safe in any thread, before `main`, and in
//! threads the MPI library or glibc create.

use std::cell::Cell;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// True when this thread is inside pdcx's own code (wrappers must pass through).
#[inline]
pub fn inside() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// While alive, this thread's calls into libc pass through every wrapper.
pub struct Passthrough(());

impl Passthrough {
    #[inline]
    pub fn enter() -> Passthrough {
        DEPTH.with(|d| d.set(d.get() + 1));
        Passthrough(())
    }
}

impl Drop for Passthrough {
    #[inline]
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nests_and_unwinds() {
        assert!(!inside());
        {
            let _a = Passthrough::enter();
            assert!(inside());
            {
                let _b = Passthrough::enter();
                assert!(inside());
            }
            assert!(inside());
        }
        assert!(!inside());
    }
}
