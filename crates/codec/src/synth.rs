//! Synthetic VPIC-like particle data for tests and the codec benchmark (`bench/codec/`).
//!
//! Eight variables of `n` particles, in the order and types of the project's VPIC-IO benchmark
//! (`bench/vpic_bdcats.py`, `bench/c/vpic_*.c`): `x y z px py pz` (float32, or float64 on request)
//! and `id1 id2` (int32). Deterministic for a given seed. Two generators:
//!
//! - [`Kind::Vpic`] — what a VPIC particle dump looks like. VPIC keeps each species sorted by
//!   voxel, so the particle arrays walk the grid: the box `[0, 100)^3` is cut into `c^3` cells
//!   (`c = round(cbrt(n / 64))`, about 64 particles per cell), cells in C order (x fastest),
//!   each cell's particles contiguous, at uniform random positions inside the cell. Momenta
//!   (`γv/c`) are a smooth bulk flow of amplitude 0.1 (`sin/cos` of the position, one period
//!   over the box) plus a thermal Maxwellian spread of 0.05 per component. `id1` is the
//!   particle's index on the rank that created it and `id2` that rank (here 0): particles were
//!   numbered in cell order at injection and have since drifted, so 75% of a cell's particles
//!   come from that cell and 25% from a face neighbour (a neighbour across the domain
//!   boundary belongs to rank 1).
//! - [`Kind::Uniform`] — the h5bench / `bench/vpic_bdcats.py` generator: floats uniform in
//!   `[0, 100)`, ints uniform in `[0, 2^31 - 1)`. Incompressible for lossless codecs and the
//!   worst case for ZFP; a floor, not a prediction.

use pdcx_core::Dtype;

/// The benchmark variables, in I/O order.
pub const VARS: [&str; 8] = ["x", "y", "z", "px", "py", "pz", "id1", "id2"];

/// Which generator (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Vpic,
    Uniform,
}

/// One variable: its name, dtype and little-endian bytes (1-D, `n` elements).
#[derive(Debug, Clone)]
pub struct Var {
    pub name: &'static str,
    pub dtype: Dtype,
    pub bytes: Vec<u8>,
}

impl Var {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bytes.len() / self.dtype.size()
    }
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    /// The values as f64 (floats and ints alike), for error measurements.
    pub fn values(&self) -> Vec<f64> {
        values_f64(self.dtype, &self.bytes)
    }
}

/// Decodes little-endian float32/float64/int32/int64 bytes as f64 values.
pub fn values_f64(dtype: Dtype, bytes: &[u8]) -> Vec<f64> {
    let w = dtype.size();
    bytes
        .chunks_exact(w)
        .map(|c| {
            let mut a = [0u8; 8];
            a[..w].copy_from_slice(c);
            match dtype {
                Dtype::Float32 => f32::from_le_bytes([a[0], a[1], a[2], a[3]]) as f64,
                Dtype::Int32 => i32::from_le_bytes([a[0], a[1], a[2], a[3]]) as f64,
                Dtype::Int64 => i64::from_le_bytes(a) as f64,
                _ => f64::from_le_bytes(a),
            }
        })
        .collect()
}

/// SplitMix64: small, fast, and good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Uniform in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit(); // (0, 1]
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// Box edge length.
pub const BOX: f64 = 100.0;
/// Target particles per cell of the VPIC generator.
pub const PPC: usize = 64;
/// Bulk-flow amplitude and thermal spread of the momenta.
pub const BULK: f64 = 0.1;
pub const THERMAL: f64 = 0.05;

/// The eight variables for `n` particles; `float` is Float32 or Float64 (the type of the six
/// float variables; anything else means Float32).
pub fn particles(kind: Kind, n: usize, float: Dtype, seed: u64) -> Vec<Var> {
    let float = if float == Dtype::Float64 {
        Dtype::Float64
    } else {
        Dtype::Float32
    };
    let mut rng = Rng::new(seed);
    let mut f: [Vec<f64>; 6] = Default::default();
    let mut ids: [Vec<i32>; 2] = Default::default();
    for v in f.iter_mut() {
        v.reserve_exact(n);
    }
    match kind {
        Kind::Uniform => {
            for v in f.iter_mut() {
                for _ in 0..n {
                    v.push(rng.unit() * BOX);
                }
            }
            for v in ids.iter_mut() {
                for _ in 0..n {
                    v.push(rng.below((1u64 << 31) - 1) as i32);
                }
            }
        }
        Kind::Vpic => vpic(&mut rng, n, &mut f, &mut ids),
    }
    let mut out = Vec::with_capacity(8);
    for (i, v) in f.iter().enumerate() {
        let bytes = match float {
            Dtype::Float64 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            _ => v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
        };
        out.push(Var {
            name: VARS[i],
            dtype: float,
            bytes,
        });
    }
    for (i, v) in ids.iter().enumerate() {
        out.push(Var {
            name: VARS[6 + i],
            dtype: Dtype::Int32,
            bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        });
    }
    out
}

fn vpic(rng: &mut Rng, n: usize, f: &mut [Vec<f64>; 6], ids: &mut [Vec<i32>; 2]) {
    let c = ((n as f64 / PPC as f64).cbrt().round() as usize).max(1);
    let cells = c * c * c;
    let h = BOX / c as f64;
    let k = std::f64::consts::TAU / BOX;
    let (base, extra) = (n / cells, n % cells);
    for cell in 0..cells {
        let count = base + usize::from(cell < extra);
        let (ix, iy, iz) = (cell % c, (cell / c) % c, cell / (c * c));
        for _ in 0..count {
            let x = (ix as f64 + rng.unit()) * h;
            let y = (iy as f64 + rng.unit()) * h;
            let z = (iz as f64 + rng.unit()) * h;
            let (sx, sy, sz) = ((k * x).sin(), (k * y).sin(), (k * z).sin());
            let (cx, cy, cz) = ((k * x).cos(), (k * y).cos(), (k * z).cos());
            f[0].push(x);
            f[1].push(y);
            f[2].push(z);
            f[3].push(BULK * sx * cy + THERMAL * rng.normal());
            f[4].push(BULK * sy * cz + THERMAL * rng.normal());
            f[5].push(BULK * sz * cx + THERMAL * rng.normal());
            // Where this particle was injected: this cell, or (25%) a face neighbour.
            let (mut o, mut rank) = ([ix as i64, iy as i64, iz as i64], 0i32);
            if rng.below(4) == 0 {
                let axis = rng.below(3) as usize;
                o[axis] += if rng.below(2) == 0 { -1 } else { 1 };
                if o[axis] < 0 || o[axis] >= c as i64 {
                    o[axis] = o[axis].rem_euclid(c as i64);
                    rank = 1;
                }
            }
            let origin = (o[0] + c as i64 * (o[1] + c as i64 * o[2])) as u64;
            let local = origin * base.max(1) as u64 + rng.below(base.max(1) as u64);
            ids[0].push(local as i32);
            ids[1].push(rank);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_types_and_ranges() {
        for kind in [Kind::Vpic, Kind::Uniform] {
            let vars = particles(kind, 10_000, Dtype::Float32, 1);
            assert_eq!(vars.len(), 8);
            for v in &vars {
                assert_eq!(v.len(), 10_000, "{}", v.name);
                let vals = v.values();
                if ["x", "y", "z"].contains(&v.name) {
                    assert!(vals.iter().all(|&x| (0.0..=BOX).contains(&x)), "{}", v.name);
                }
            }
            assert_eq!(vars[0].dtype, Dtype::Float32);
            assert_eq!(vars[6].dtype, Dtype::Int32);
        }
        let a = particles(Kind::Vpic, 1000, Dtype::Float64, 7);
        let b = particles(Kind::Vpic, 1000, Dtype::Float64, 7);
        assert_eq!(a[3].bytes, b[3].bytes);
        assert_eq!(a[3].dtype, Dtype::Float64);
    }
}
