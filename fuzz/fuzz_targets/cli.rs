//! The `pdcx` command's parsers of user input: `--region` arguments (`0:10,:,5`) and the
//! headers of `.npy` files given to `pdcx put`. The first input byte picks the parser.
//!
//! Properties: no panic; an accepted region has the object's rank and lies inside its dims,
//! and its `START:END` spelling parses to the same region; an accepted `.npy` header starts its
//! data inside the bytes read, and the header pdcx writes for it (`pdcx get`) reads back to the
//! same dtype and shape.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pdcx_cli::{npy, region_arg};

fn region(rest: &[u8]) {
    // Dims: a count byte then u16s; the spec is the remaining text.
    let Some((&n, rest)) = rest.split_first() else {
        return;
    };
    let n = (n % 6) as usize;
    if rest.len() < 2 * n {
        return;
    }
    let (d, spec) = rest.split_at(2 * n);
    let dims: Vec<u64> = d
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]) as u64)
        .map(|v| if v == 0xffff { u64::MAX } else { v })
        .collect();
    let Ok(spec) = std::str::from_utf8(spec) else {
        return;
    };
    let Ok(r) = region_arg::parse(spec, &dims) else {
        return;
    };
    assert_eq!(r.ndim(), dims.len());
    r.validate().expect("a parsed region is valid");
    for (i, &dim) in dims.iter().enumerate() {
        assert!(
            r.count[i] > 0 && r.offset[i] + r.count[i] <= dim,
            "{spec:?} {dims:?} {r:?}"
        );
    }
    let canonical: Vec<String> = (0..r.ndim())
        .map(|i| format!("{}:{}", r.offset[i], r.offset[i] + r.count[i]))
        .collect();
    assert_eq!(region_arg::parse(&canonical.join(","), &dims).unwrap(), r);
}

fn npy_header(rest: &[u8]) {
    let mut r = rest;
    let Ok(h) = npy::read_header(&mut r) else {
        return;
    };
    assert!(h.data_offset <= rest.len() as u64);
    assert_eq!(rest.len() - r.len(), h.data_offset as usize);
    let _ = h.data_len();
    let written = npy::encode_header(h.dtype, &h.shape);
    let back = npy::read_header(&mut &written[..]).expect("pdcx's own header reads back");
    assert_eq!((back.dtype, &back.shape), (h.dtype, &h.shape));
    assert_eq!(back.data_offset as usize, written.len());
    assert_eq!(back.data_offset % 64, 0, "data is 64-byte aligned");
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        region(rest);
    } else {
        npy_header(rest);
    }
});
