//! Directory listings of `pdcx://` name prefixes: `opendir` hands out a boxed listing as a
//! `DIR *`, recognised by address in `readdir`/`closedir`/`rewinddir`/`dirfd`.

use super::ours;
use crate::names;
use crate::{ctx, errno_of, guarded, set_errno};
use libc::{c_char, c_int, DIR};
use pdcx_client::file::Kind;
use std::collections::HashSet;
use std::sync::Mutex;

/// A directory listing handed out as a `DIR *`.
struct Listing {
    entries: Vec<(Vec<u8>, bool)>,
    next: usize,
    ent: libc::dirent64,
}

/// Addresses of the listings this library handed out.
static LISTINGS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn is_listing(d: *mut DIR) -> bool {
    let l = LISTINGS.lock().unwrap_or_else(|p| p.into_inner());
    l.as_ref().is_some_and(|s| s.contains(&(d as usize)))
}

/// # Safety
/// C `opendir(path)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    let Some(rest) = ours(path) else {
        return pass!(opendir: unsafe extern "C" fn(*const c_char) -> *mut DIR, std::ptr::null_mut(), (path));
    };
    guarded("opendir", std::ptr::null_mut(), || {
        let name = names::lexical(rest);
        let c = match ctx() {
            Ok(c) => c,
            Err(_) => {
                set_errno(libc::EIO);
                return std::ptr::null_mut();
            }
        };
        let found = c.client.file_kind(&name).and_then(|k| match k {
            Some(Kind::Dir) => c.client.file_dir(&name).map(Some),
            Some(Kind::File(_)) => Ok(None),
            None => Err(pdcx_core::Error::new(pdcx_core::ErrorKind::NotFound, "")),
        });
        let children = match found {
            Ok(Some(ch)) => ch,
            Ok(None) => {
                set_errno(libc::ENOTDIR);
                return std::ptr::null_mut();
            }
            Err(e) => {
                set_errno(errno_of(&e));
                return std::ptr::null_mut();
            }
        };
        let mut entries = vec![(b".".to_vec(), true), (b"..".to_vec(), true)];
        entries.extend(
            children
                .into_iter()
                .map(|e| (e.name.into_bytes(), e.stat.is_none())),
        );
        let l = Box::new(Listing {
            entries,
            next: 0,
            // SAFETY: a plain C struct; all-zero is a valid value.
            ent: unsafe { std::mem::zeroed() },
        });
        let p = Box::into_raw(l) as *mut DIR;
        LISTINGS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(HashSet::new)
            .insert(p as usize);
        p
    })
}

fn next_entry(d: *mut DIR) -> *mut libc::dirent64 {
    // SAFETY: `d` is one of our listings (checked by the caller) and not freed.
    let l = unsafe { &mut *(d as *mut Listing) };
    let Some((name, dir)) = l.entries.get(l.next) else {
        return std::ptr::null_mut();
    };
    l.next += 1;
    let n = name.len().min(l.ent.d_name.len() - 1);
    l.ent.d_name.fill(0);
    for (dst, &src) in l.ent.d_name.iter_mut().zip(&name[..n]) {
        *dst = src as c_char;
    }
    l.ent.d_ino = name.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    }) | 1;
    l.ent.d_off = l.next as i64;
    l.ent.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    l.ent.d_type = if *dir { libc::DT_DIR } else { libc::DT_REG };
    &mut l.ent
}

/// # Safety
/// C `readdir(dir)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn readdir(d: *mut DIR) -> *mut libc::dirent {
    if is_listing(d) {
        return next_entry(d).cast();
    }
    pass!(readdir: unsafe extern "C" fn(*mut DIR) -> *mut libc::dirent, std::ptr::null_mut(), (d))
}

/// # Safety
/// C `readdir64(dir)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn readdir64(d: *mut DIR) -> *mut libc::dirent64 {
    if is_listing(d) {
        return next_entry(d);
    }
    pass!(readdir64: unsafe extern "C" fn(*mut DIR) -> *mut libc::dirent64, std::ptr::null_mut(), (d))
}

/// # Safety
/// C `closedir(dir)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    let ours = {
        let mut l = LISTINGS.lock().unwrap_or_else(|p| p.into_inner());
        l.as_mut().is_some_and(|s| s.remove(&(d as usize)))
    };
    if ours {
        // SAFETY: made by Box::into_raw in opendir, removed from the set just now.
        drop(unsafe { Box::from_raw(d as *mut Listing) });
        return 0;
    }
    pass!(closedir: unsafe extern "C" fn(*mut DIR) -> c_int, -1, (d))
}

/// # Safety
/// C `rewinddir(dir)`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    if is_listing(d) {
        // SAFETY: one of our listings.
        unsafe { (*(d as *mut Listing)).next = 0 };
        return;
    }
    if let Some(f) = real!(rewinddir: unsafe extern "C" fn(*mut DIR)) {
        // SAFETY: the caller's handle.
        unsafe { f(d) }
    }
}

/// # Safety
/// C `dirfd(dir)`: our listings have no descriptor.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn dirfd(d: *mut DIR) -> c_int {
    if is_listing(d) {
        set_errno(libc::ENOTSUP);
        return -1;
    }
    pass!(dirfd: unsafe extern "C" fn(*mut DIR) -> c_int, -1, (d))
}
