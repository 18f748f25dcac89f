//! Compression ratio and speed of every codec on VPIC-like particle data (`bench/codec/`).
//!
//! ```sh
//! cargo run --release -p pdcx-codec --example codec_bench -- [--particles N] [--extent N]
//!     [--data vpic|uniform] [--float f32|f64] [--repeat R] [--codecs a,b,c]
//! ```
//!
//! The data is `pdcx_codec::synth` (8 variables; see its docs). Each variable is cut into
//! extents of `--extent` elements (default 1 Mi: a 4 MiB float32 write, as one VPIC-IO rank
//! writes it) and every extent is encoded and decoded on one thread, as the server would at
//! flush and read time. Speeds are raw (uncompressed) MB/s (10^6 bytes) over the whole pass,
//! best of `--repeat` passes after one warm-up pass. Encode includes allocating the output;
//! decode writes into a reused buffer and includes checking the body crc32c. The `memcpy` row
//! is `to_vec()` / `copy_from_slice` of the same extents: the ceiling on this machine.

use pdcx_codec::synth::{self, Kind, Var};
use pdcx_codec::{decode, encode, Codec, Header};
use pdcx_core::Dtype;
use std::time::Instant;

const DEFAULT_CODECS: &str = "none,lz4,zstd:1,zstd:3,zstd:9,zfp-accuracy:1e-2,zfp-accuracy:1e-3,\
                              zfp-accuracy:1e-4,zfp-rate:8,zfp-rate:16";

struct Opts {
    particles: usize,
    extent: usize,
    kind: Kind,
    float: Dtype,
    repeat: usize,
    codecs: Vec<Codec>,
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        particles: 4 << 20,
        extent: 1 << 20,
        kind: Kind::Vpic,
        float: Dtype::Float32,
        repeat: 3,
        codecs: Vec::new(),
    };
    let mut codecs = DEFAULT_CODECS.to_string();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--particles" => o.particles = val()?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--extent" => o.extent = val()?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--repeat" => o.repeat = val()?.parse().map_err(|e| format!("{a}: {e}"))?,
            "--codecs" => codecs = val()?,
            "--data" => {
                o.kind = match val()?.as_str() {
                    "vpic" => Kind::Vpic,
                    "uniform" => Kind::Uniform,
                    v => return Err(format!("--data {v}: expected vpic or uniform")),
                }
            }
            "--float" => {
                o.float = match val()?.as_str() {
                    "f32" | "float32" => Dtype::Float32,
                    "f64" | "float64" => Dtype::Float64,
                    v => return Err(format!("--float {v}: expected f32 or f64")),
                }
            }
            "-h" | "--help" => {
                return Err(
                    "usage: codec_bench [--particles N] [--extent N] [--data vpic|uniform] \
                     [--float f32|f64] [--repeat R] [--codecs a,b,c]"
                        .into(),
                )
            }
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    o.codecs = codecs
        .split(',')
        .map(|s| s.parse::<Codec>().map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    if o.particles == 0 || o.extent == 0 || o.repeat == 0 {
        return Err("--particles, --extent and --repeat must be positive".into());
    }
    Ok(o)
}

/// Totals of one codec over a set of variables.
#[derive(Default)]
struct Row {
    raw: u64,
    encoded: u64,
    enc_s: f64,
    dec_s: f64,
    err_pos: f64,
    err_mom: f64,
    fallbacks: Vec<String>,
}

/// What to run: a codec, or plain memcpy for the ceiling.
#[derive(Clone, Copy)]
enum Method {
    Memcpy,
    Codec(Codec),
}

fn extents(v: &Var, extent: usize) -> Vec<(usize, usize)> {
    let (n, w) = (v.len(), v.dtype.size());
    (0..n)
        .step_by(extent)
        .map(|s| (s * w, (n - s).min(extent) * w))
        .collect()
}

fn run(method: Method, vars: &[&Var], o: &Opts) -> Result<Row, String> {
    let mut row = Row::default();
    let mut best_enc = f64::INFINITY;
    let mut best_dec = f64::INFINITY;
    for pass in 0..=o.repeat {
        let (mut enc_s, mut dec_s) = (0.0, 0.0);
        let (mut raw, mut encoded) = (0u64, 0u64);
        for v in vars {
            let mut out = vec![0u8; o.extent.min(v.len()) * v.dtype.size()];
            for (off, len) in extents(v, o.extent) {
                let src = &v.bytes[off..off + len];
                let shape = [(len / v.dtype.size()) as u64];
                let out = &mut out[..len];
                match method {
                    Method::Memcpy => {
                        let t = Instant::now();
                        let copy = std::hint::black_box(src.to_vec());
                        enc_s += t.elapsed().as_secs_f64();
                        let t = Instant::now();
                        out.copy_from_slice(&copy);
                        std::hint::black_box(&out);
                        dec_s += t.elapsed().as_secs_f64();
                        encoded += copy.len() as u64;
                    }
                    Method::Codec(codec) => {
                        let t = Instant::now();
                        let enc =
                            encode(&codec, v.dtype, &shape, src).map_err(|e| e.to_string())?;
                        enc_s += t.elapsed().as_secs_f64();
                        let t = Instant::now();
                        let h = decode(v.dtype, &shape, &enc, out).map_err(|e| e.to_string())?;
                        dec_s += t.elapsed().as_secs_f64();
                        encoded += enc.len() as u64;
                        if pass == 0 {
                            record_error(&mut row, v, codec, &h, src, out);
                        }
                    }
                }
                raw += len as u64;
            }
        }
        if pass > 0 {
            best_enc = best_enc.min(enc_s);
            best_dec = best_dec.min(dec_s);
        }
        (row.raw, row.encoded) = (raw, encoded);
    }
    (row.enc_s, row.dec_s) = (best_enc, best_dec);
    Ok(row)
}

fn record_error(row: &mut Row, v: &Var, codec: Codec, h: &Header, src: &[u8], out: &[u8]) {
    if h.codec != codec {
        let note = format!("{}→{}", v.name, h.codec.name());
        if !row.fallbacks.contains(&note) {
            row.fallbacks.push(note);
        }
    }
    if !codec.is_lossy() {
        assert_eq!(src, out, "lossless codec {codec} changed {}", v.name);
        return;
    }
    let a = synth::values_f64(v.dtype, src);
    let b = synth::values_f64(v.dtype, out);
    let err = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    let slot = if v.name.starts_with('p') {
        &mut row.err_mom
    } else {
        &mut row.err_pos
    };
    *slot = slot.max(err);
}

fn mbps(bytes: u64, s: f64) -> String {
    format!("{:.0}", bytes as f64 / s / 1e6)
}

fn table(title: &str, vars: &[&Var], o: &Opts, lossy: bool) -> Result<Vec<(String, Row)>, String> {
    let raw_mb = vars.iter().map(|v| v.bytes.len()).sum::<usize>() as f64 / 1e6;
    println!("\n### {title} ({} vars, {raw_mb:.0} MB raw)\n", vars.len());
    if lossy {
        println!("| codec | ratio | encode MB/s | decode MB/s | max err x,y,z | max err px,py,pz | notes |");
        println!("|---|---:|---:|---:|---:|---:|---|");
    } else {
        println!("| codec | ratio | encode MB/s | decode MB/s | notes |");
        println!("|---|---:|---:|---:|---|");
    }
    let mut methods = vec![("memcpy".to_string(), Method::Memcpy)];
    for c in &o.codecs {
        if (lossy || !c.is_lossy()) && vars.iter().all(|v| c.check_dtype(v.dtype).is_ok()) {
            methods.push((c.to_string(), Method::Codec(*c)));
        }
    }
    let mut rows = Vec::new();
    for (name, m) in methods {
        let r = run(m, vars, o)?;
        let ratio = r.raw as f64 / r.encoded as f64;
        let notes = if r.fallbacks.is_empty() {
            String::new()
        } else {
            format!("stored as: {}", r.fallbacks.join(", "))
        };
        let (enc, dec) = (mbps(r.raw, r.enc_s), mbps(r.raw, r.dec_s));
        let lossy_codec = matches!(m, Method::Codec(c) if c.is_lossy());
        if lossy {
            let (ep, em) = if lossy_codec {
                (format!("{:.2e}", r.err_pos), format!("{:.2e}", r.err_mom))
            } else {
                ("0".into(), "0".into())
            };
            println!("| {name} | {ratio:.2} | {enc} | {dec} | {ep} | {em} | {notes} |");
        } else {
            println!("| {name} | {ratio:.2} | {enc} | {dec} | {notes} |");
        }
        rows.push((name, r));
    }
    Ok(rows)
}

/// The whole dump with one codec per object, from the two tables above: every lossless codec on
/// all 8 variables, and each lossy codec on the floats with `ids_codec` on the ids.
fn mix(floats: &[(String, Row)], ids: &[(String, Row)], ids_codec: &str) {
    println!(
        "\n### whole dump (8 vars), one codec per object: combined from the two tables above\n"
    );
    println!("| floats | ids | ratio | encode MB/s | decode MB/s |");
    println!("|---|---|---:|---:|---:|");
    let find = |name: &str| ids.iter().find(|(n, _)| n == name).map(|(_, r)| r);
    for (name, f) in floats {
        let lossy = name.starts_with("zfp");
        let id_name = if lossy { ids_codec } else { name.as_str() };
        let Some(i) = find(id_name) else { continue };
        let raw = f.raw + i.raw;
        println!(
            "| {name} | {id_name} | {:.2} | {} | {} |",
            raw as f64 / (f.encoded + i.encoded) as f64,
            mbps(raw, f.enc_s + i.enc_s),
            mbps(raw, f.dec_s + i.dec_s)
        );
    }
}

fn main() {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("codec_bench: {e}");
            std::process::exit(2);
        }
    };
    let t = Instant::now();
    let vars = synth::particles(o.kind, o.particles, o.float, 42);
    eprintln!(
        "generated {} particles in {:.1}s",
        o.particles,
        t.elapsed().as_secs_f64()
    );
    let kind = match o.kind {
        Kind::Vpic => "vpic",
        Kind::Uniform => "uniform",
    };
    println!(
        "## data={kind} particles={} float={} extent={} elements, best of {} (zfp codec {}, {}-bit stream words)",
        o.particles,
        o.float,
        o.extent,
        o.repeat,
        pdcx_codec::zfp_codec_version(),
        pdcx_codec::zfp_word_bits(),
    );
    let floats: Vec<&Var> = vars.iter().filter(|v| v.dtype == o.float).collect();
    let ids: Vec<&Var> = vars.iter().filter(|v| v.dtype != o.float).collect();
    let res = table("float variables x y z px py pz", &floats, &o, true)
        .and_then(|f| table("id variables id1 id2 (int32)", &ids, &o, false).map(|i| (f, i)));
    match res {
        Ok((f, i)) => mix(&f, &i, "zstd:1"),
        Err(e) => {
            eprintln!("codec_bench: {e}");
            std::process::exit(1);
        }
    }
}
