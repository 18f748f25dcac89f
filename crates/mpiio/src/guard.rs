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

/// A thread-local flag set while a guard value lives (restoring the outer value on drop, so
/// guards nest): `$query()` reads it, `$guard::enter()` sets it.
macro_rules! scoped_flag {
    ($(#[$doc:meta])* $query:ident, $guard:ident, $cell:ident) => {
        thread_local! {
            static $cell: Cell<bool> = const { Cell::new(false) };
        }

        $(#[$doc])*
        #[inline]
        pub fn $query() -> bool {
            $cell.with(|d| d.get())
        }

        #[doc = concat!("While alive, [`", stringify!($query), "`] is true on this thread.")]
        pub struct $guard(bool);

        impl $guard {
            #[inline]
            pub fn enter() -> $guard {
                $guard($cell.with(|d| d.replace(true)))
            }
        }

        impl Drop for $guard {
            #[inline]
            fn drop(&mut self) {
                $cell.with(|d| d.set(self.0));
            }
        }
    };
}

scoped_flag! {
    /// True while this thread runs the MPI library's own `MPI_File_sync`/`MPI_File_close` of a
    /// logged file, which a consistency point follows: an `fsync` or `close` the library makes
    /// there needs to do nothing (the consistency point commits this process's writes and makes
    /// them durable, the sealing rank's in the same round trip as its seal).
    in_sync_or_close, SyncOrClose, IN_SYNC_OR_CLOSE
}

scoped_flag! {
    /// True while this thread is inside one of the MPI functions this library wraps: the files
    /// the MPI library creates there next to the program's (ROMIO's `.shfp.` and lock-test
    /// files, OMPIO's shared-pointer files) are its own business, not the program's plain files.
    in_mpi, InMpi, IN_MPI
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

    #[test]
    fn sync_or_close_restores_the_outer_state() {
        assert!(!in_sync_or_close());
        {
            let _a = SyncOrClose::enter();
            {
                let _b = SyncOrClose::enter();
                assert!(in_sync_or_close());
            }
            assert!(in_sync_or_close());
        }
        assert!(!in_sync_or_close());
    }
}
