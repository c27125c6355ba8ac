//! The UCI 8×8 handwritten digits (1,797 samples, CC BY 4.0), embedded in the binary; see `data/README.md`.

use std::io::Read;

use super::InMemory;
use crate::error::{Error, Result};

const DIGITS_CSV_GZ: &[u8] = include_bytes!("../../data/digits.csv.gz");

/// The digits data set: images `[1, 8, 8]` with pixels 0..16, labels 0..9.
pub struct Digits;

impl Digits {
    /// Number of samples.
    pub const LEN: usize = 1797;

    /// Decodes every sample: pixels scaled to `[0, 1]` (divided by 16), as one in-memory data set.
    pub fn load() -> Result<InMemory> {
        let mut text = String::new();
        flate2::read::GzDecoder::new(DIGITS_CSV_GZ)
            .read_to_string(&mut text)
            .map_err(|e| Error::Format {
                path: "data/digits.csv.gz".into(),
                message: e.to_string(),
            })?;
        let mut x = Vec::with_capacity(Self::LEN * 64);
        let mut y = Vec::with_capacity(Self::LEN);
        for (line_no, line) in text.lines().enumerate() {
            let vals: Vec<i32> = line
                .split(',')
                .map(|v| v.trim().parse::<i32>())
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| Error::Format {
                    path: "data/digits.csv.gz".into(),
                    message: format!("line {}: {e}", line_no + 1),
                })?;
            if vals.len() != 65 {
                return Err(Error::Format {
                    path: "data/digits.csv.gz".into(),
                    message: format!("line {}: {} values, expected 65", line_no + 1, vals.len()),
                });
            }
            x.extend(vals[..64].iter().map(|&p| p as f32 / 16.0));
            y.push(vals[64]);
        }
        InMemory::new(x, &[1, 8, 8], y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Dataset;

    #[test]
    fn decodes_every_sample() {
        let d = Digits::load().expect("digits");
        assert_eq!(d.len(), Digits::LEN);
        assert_eq!(d.sample_shape(), &[1, 8, 8]);
        let mut counts = [0usize; 10];
        for i in 0..d.len() {
            counts[d.label(i) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (170..=190).contains(&c)),
            "{counts:?}"
        );
        let mut buf = vec![0.0; 64];
        d.sample(0, &mut buf);
        assert!(buf.iter().all(|v| (0.0..=1.0).contains(v)));
        assert_eq!(d.label(0), 0);
    }
}
