//! A counter-based random generator: each value is a pure function of (seed, index).
//!
//! The same function is written in OpenCL C (`kernels/rng.h` style helpers in the kernels that need it), so a
//! seeded tensor or dropout mask is identical on every device and independent of launch geometry.

/// The 64-bit mix of `seed` and `counter` (SplitMix64's finaliser over their combination).
pub fn hash(seed: u64, counter: u64) -> u64 {
    let mut z = seed ^ counter.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(0x6A09_E667_F3BC_C909);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform value in `[0, 1)` with 24 random bits.
pub fn uniform(seed: u64, index: u64) -> f32 {
    (hash(seed, index) >> 40) as f32 * (1.0 / 16_777_216.0)
}

/// A standard normal value (Box–Muller over two uniforms of the index).
pub fn normal(seed: u64, index: u64) -> f32 {
    let u1 = ((hash(seed, 2 * index) >> 40) as f64 + 0.5) / 16_777_216.0;
    let u2 = (hash(seed, 2 * index + 1) >> 40) as f64 / 16_777_216.0;
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_is_in_range_and_reproducible() {
        let a: Vec<f32> = (0..10_000).map(|i| uniform(7, i)).collect();
        assert!(a.iter().all(|&v| (0.0..1.0).contains(&v)));
        assert_eq!(a[123], uniform(7, 123));
        assert_ne!(uniform(7, 1), uniform(8, 1));
        let mean = a.iter().sum::<f32>() / a.len() as f32;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
    }

    #[test]
    fn normal_has_unit_moments() {
        let v: Vec<f64> = (0..20_000).map(|i| normal(1, i) as f64).collect();
        let m = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64;
        assert!(m.abs() < 0.03 && (var - 1.0).abs() < 0.05, "mean {m} var {var}");
        assert!(v.iter().all(|x| x.is_finite()));
    }
}
