//! pdcx extension (`pdcx_ext.h`): pull and push between linked sites from C, as
//! `pdcx pull` and `pdcx push` do, with the deployment `PDCinit` connected to.

use crate::{client, cstr, ffi_err, Perr};
use std::ffi::c_char;

/// An optional C string argument (NULL: None).
///
/// # Safety
/// `p` must be NULL or point to a NUL-terminated string.
unsafe fn opt<'a>(p: *const c_char, what: &str) -> crate::R<Option<&'a str>> {
    if p.is_null() {
        Ok(None)
    } else {
        // SAFETY: forwarded from the caller.
        unsafe { cstr(p, what) }.map(Some)
    }
}

/// The deployment root (where linked sites are recorded) and quiet transfer options.
fn linked(
    c: &pdcx_client::Client,
) -> crate::R<(std::path::PathBuf, pdcx_xsite::transfer::Options)> {
    let root = c
        .root()
        .ok_or("the client has no deployment root")?
        .to_path_buf();
    let opts = pdcx_xsite::transfer::Options {
        progress: false,
        ..Default::default()
    };
    Ok((root, opts))
}

/// `PDCXsite_pull(source, region, as_name)`: `source` is "SITE:OBJECT" or "s3://BUCKET/KEY";
/// `region` ("0:10,:,5") and `as_name` may be NULL.
///
/// # Safety
/// Each argument must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCXsite_pull(
    source: *const c_char,
    region: *const c_char,
    as_name: *const c_char,
) -> Perr {
    ffi_err("PDCXsite_pull", || {
        // SAFETY: the caller passes NULL or NUL-terminated strings.
        let (source, region, as_name) = unsafe {
            (
                cstr(source, "source")?,
                opt(region, "region")?,
                opt(as_name, "as_name")?,
            )
        };
        let c = client()?;
        if source.starts_with("s3://") {
            pdcx_xsite::meeting::pull(&c, source).map_err(|e| e.to_string())?;
            return Ok(());
        }
        let (site, name) = source
            .split_once(':')
            .filter(|(s, n)| !s.is_empty() && !n.is_empty())
            .ok_or_else(|| format!("source {source:?}: expected SITE:OBJECT or s3://BUCKET/KEY"))?;
        let (root, opts) = linked(&c)?;
        pdcx_xsite::transfer::pull(&c, &root, site, name, region, as_name, &opts)
            .map_err(|e| e.to_string())?;
        Ok(())
    })
}

/// `PDCXsite_push(name, to, region)`: `to` is a linked site or "s3://BUCKET/PREFIX"; `region`
/// may be NULL (the whole object).
///
/// # Safety
/// Each argument must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn PDCXsite_push(
    name: *const c_char,
    to: *const c_char,
    region: *const c_char,
) -> Perr {
    ffi_err("PDCXsite_push", || {
        // SAFETY: the caller passes NULL or NUL-terminated strings.
        let (name, to, region) =
            unsafe { (cstr(name, "name")?, cstr(to, "to")?, opt(region, "region")?) };
        let c = client()?;
        if to.starts_with("s3://") {
            let site = pdcx_core::config::SITE
                .text()
                .unwrap_or_else(|| "site".into());
            pdcx_xsite::meeting::push(&c, name, region, &site, to).map_err(|e| e.to_string())?;
            return Ok(());
        }
        let (root, opts) = linked(&c)?;
        pdcx_xsite::transfer::push(&c, &root, name, region, to, &opts)
            .map_err(|e| e.to_string())?;
        Ok(())
    })
}
