//! Batching with a seeded shuffle, CPU transforms and a background prefetch thread.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, sync_channel};
use std::thread::JoinHandle;

use crate::error::{Error, Result};
use crate::rng;

/// A data set of fixed-shape f32 samples with integer labels.
pub trait Dataset: Send + Sync {
    /// Number of samples.
    fn len(&self) -> usize;
    /// Whether there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The shape of one sample (e.g. `[1, 8, 8]`).
    fn sample_shape(&self) -> &[usize];
    /// Writes sample `i` into `out` (`numel(sample_shape)` values).
    fn sample(&self, i: usize, out: &mut [f32]);
    /// The label of sample `i`.
    fn label(&self, i: usize) -> i32;
}

/// Samples and labels held in memory.
#[derive(Clone)]
pub struct InMemory {
    x: Arc<[f32]>,
    shape: Vec<usize>,
    y: Arc<[i32]>,
}

impl InMemory {
    /// A data set of `y.len()` samples of `sample_shape`, stored back to back in `x`.
    pub fn new(x: Vec<f32>, sample_shape: &[usize], y: Vec<i32>) -> Result<Self> {
        let per: usize = sample_shape.iter().product();
        if per == 0 || x.len() != per * y.len() {
            return Err(Error::Shape(format!(
                "{} values cannot be {} samples of shape {sample_shape:?}",
                x.len(),
                y.len()
            )));
        }
        Ok(InMemory {
            x: x.into(),
            shape: sample_shape.to_vec(),
            y: y.into(),
        })
    }

    /// Splits into (train, test) with a seeded shuffle; `test_fraction` in (0, 1).
    pub fn split(&self, test_fraction: f32, seed: u64) -> Result<(InMemory, InMemory)> {
        if !(test_fraction > 0.0 && test_fraction < 1.0) {
            return Err(Error::Invalid(format!(
                "test_fraction {test_fraction} must lie strictly between 0 and 1"
            )));
        }
        let order = permutation(self.len(), seed);
        let n_test = ((self.len() as f32) * test_fraction).round() as usize;
        let per: usize = self.shape.iter().product();
        let take = |idx: &[usize]| -> Result<InMemory> {
            let mut x = Vec::with_capacity(idx.len() * per);
            let mut y = Vec::with_capacity(idx.len());
            for &i in idx {
                x.extend_from_slice(&self.x[i * per..(i + 1) * per]);
                y.push(self.y[i]);
            }
            InMemory::new(x, &self.shape, y)
        };
        Ok((take(&order[n_test..])?, take(&order[..n_test])?))
    }
}

impl Dataset for InMemory {
    fn len(&self) -> usize {
        self.y.len()
    }
    fn sample_shape(&self) -> &[usize] {
        &self.shape
    }
    fn sample(&self, i: usize, out: &mut [f32]) {
        let per = out.len();
        out.copy_from_slice(&self.x[i * per..(i + 1) * per]);
    }
    fn label(&self, i: usize) -> i32 {
        self.y[i]
    }
}

/// A seeded permutation of `0..n` (Fisher–Yates over the counter-based generator).
pub fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (rng::hash(seed, i as u64) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

/// A CPU transform applied to each sample of a batch, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Transform {
    /// Multiplies every value (e.g. 1/255 to turn bytes into floats).
    Scale(f32),
    /// `(x − mean) / std` per channel (channel = first sample dimension).
    Normalize {
        /// Per-channel means.
        mean: Vec<f32>,
        /// Per-channel standard deviations (non-zero).
        std: Vec<f32>,
    },
    /// Mirrors the last dimension with probability `p`.
    FlipHorizontal {
        /// Probability of a flip.
        p: f32,
    },
    /// Pads the last two dimensions by `pad` zeros and takes a random crop of the original size.
    RandomCrop {
        /// Padding on each side.
        pad: usize,
    },
}

impl Transform {
    fn check(&self, shape: &[usize]) -> Result<()> {
        match self {
            Transform::Scale(s) if !s.is_finite() => {
                Err(Error::Invalid(format!("Scale({s}) must be finite")))
            }
            Transform::Normalize { mean, std } => {
                let c = shape.first().copied().unwrap_or(1);
                if mean.len() != c || std.len() != c {
                    return Err(Error::Shape(format!(
                        "Normalize has {} means and {} stds for {c} channels of samples shaped {shape:?}",
                        mean.len(),
                        std.len()
                    )));
                }
                if std.iter().any(|s| *s == 0.0 || !s.is_finite())
                    || mean.iter().any(|m| !m.is_finite())
                {
                    return Err(Error::Invalid(
                        "Normalize needs finite means and finite non-zero stds".into(),
                    ));
                }
                Ok(())
            }
            Transform::FlipHorizontal { p } if !(0.0..=1.0).contains(p) => Err(Error::Invalid(
                format!("FlipHorizontal p={p} must be in [0, 1]"),
            )),
            Transform::RandomCrop { .. } | Transform::FlipHorizontal { .. } if shape.len() < 2 => {
                Err(Error::Shape(format!(
                    "{self:?} needs samples with at least 2 dimensions, got {shape:?}"
                )))
            }
            _ => Ok(()),
        }
    }

    fn apply(&self, shape: &[usize], x: &mut [f32], seed: u64) {
        let w = *shape.last().unwrap_or(&1);
        let h = if shape.len() >= 2 {
            shape[shape.len() - 2]
        } else {
            1
        };
        match self {
            Transform::Scale(s) => x.iter_mut().for_each(|v| *v *= s),
            Transform::Normalize { mean, std } => {
                let per = x.len() / mean.len().max(1);
                for (c, chunk) in x.chunks_mut(per.max(1)).enumerate() {
                    chunk.iter_mut().for_each(|v| *v = (*v - mean[c]) / std[c]);
                }
            }
            Transform::FlipHorizontal { p } => {
                if rng::uniform(seed, 1) < *p {
                    x.chunks_mut(w).for_each(|row| row.reverse());
                }
            }
            Transform::RandomCrop { pad } => {
                let pad = *pad as i64;
                let dy = (rng::hash(seed, 2) % (2 * pad as u64 + 1)) as i64 - pad;
                let dx = (rng::hash(seed, 3) % (2 * pad as u64 + 1)) as i64 - pad;
                for plane in x.chunks_mut(h * w) {
                    let src = plane.to_vec();
                    for r in 0..h as i64 {
                        for c in 0..w as i64 {
                            let (sr, sc) = (r + dy, c + dx);
                            plane[(r * w as i64 + c) as usize] =
                                if sr >= 0 && sr < h as i64 && sc >= 0 && sc < w as i64 {
                                    src[(sr * w as i64 + sc) as usize]
                                } else {
                                    0.0
                                };
                        }
                    }
                }
            }
        }
    }
}

/// One batch on the host: `x` of shape `x_shape` (batch first) and one label per sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The samples, back to back.
    pub x: Vec<f32>,
    /// `[batch, sample_shape…]`.
    pub x_shape: Vec<usize>,
    /// The labels.
    pub y: Vec<i32>,
}

/// Batches of a data set: seeded shuffle per epoch, `drop_last`, transforms, and a prefetch thread.
#[derive(Clone)]
pub struct DataLoader {
    dataset: Arc<dyn Dataset>,
    batch_size: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
    transforms: Vec<Transform>,
    prefetch: usize,
}

impl DataLoader {
    /// A loader over `dataset` with `batch_size` ≥ 1; no shuffle, no transforms, two batches prefetched.
    pub fn new(dataset: Arc<dyn Dataset>, batch_size: usize) -> Result<Self> {
        if batch_size == 0 {
            return Err(Error::Invalid("batch_size must be at least 1".into()));
        }
        Ok(DataLoader {
            dataset,
            batch_size,
            shuffle: false,
            seed: 0,
            drop_last: false,
            transforms: Vec::new(),
            prefetch: 2,
        })
    }

    /// Shuffles with `seed` (a new order each epoch, reproducible).
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.shuffle = true;
        self.seed = seed;
        self
    }

    /// Drops a last batch smaller than `batch_size`.
    pub fn drop_last(mut self, on: bool) -> Self {
        self.drop_last = on;
        self
    }

    /// Appends a transform, checked against the sample shape.
    pub fn transform(mut self, t: Transform) -> Result<Self> {
        t.check(self.dataset.sample_shape())?;
        self.transforms.push(t);
        Ok(self)
    }

    /// How many batches are prepared ahead by the background thread (at least 1).
    pub fn prefetch(mut self, n: usize) -> Self {
        self.prefetch = n.max(1);
        self
    }

    /// Batches per epoch: ⌈n / batch⌉, or ⌊n / batch⌋ with `drop_last`.
    pub fn len(&self) -> usize {
        let n = self.dataset.len();
        if self.drop_last {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }

    /// Whether an epoch yields no batch.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batches of epoch `epoch`, produced on a background thread.
    pub fn epoch(&self, epoch: u64) -> BatchIter {
        let (tx, rx) = sync_channel(self.prefetch);
        let me = self.clone();
        let handle = std::thread::spawn(move || {
            let n = me.dataset.len();
            let order = if me.shuffle {
                permutation(n, rng::hash(me.seed, epoch))
            } else {
                (0..n).collect()
            };
            let shape = me.dataset.sample_shape().to_vec();
            let per: usize = shape.iter().product();
            for b in 0..me.len() {
                let idx = &order[b * me.batch_size..((b + 1) * me.batch_size).min(n)];
                let mut x = vec![0.0f32; idx.len() * per];
                let mut y = Vec::with_capacity(idx.len());
                for (k, &i) in idx.iter().enumerate() {
                    let s = &mut x[k * per..(k + 1) * per];
                    me.dataset.sample(i, s);
                    let sample_seed = rng::hash(rng::hash(me.seed ^ 0x5eed, epoch), i as u64);
                    for (t_i, t) in me.transforms.iter().enumerate() {
                        t.apply(&shape, s, rng::hash(sample_seed, t_i as u64));
                    }
                    y.push(me.dataset.label(i));
                }
                let mut x_shape = vec![idx.len()];
                x_shape.extend_from_slice(&shape);
                if tx.send(Batch { x, x_shape, y }).is_err() {
                    return;
                }
            }
        });
        BatchIter {
            rx,
            handle: Some(handle),
        }
    }
}

/// The batches of one epoch; dropping it stops the producer.
pub struct BatchIter {
    rx: Receiver<Batch>,
    handle: Option<JoinHandle<()>>,
}

impl Iterator for BatchIter {
    type Item = Batch;
    fn next(&mut self) -> Option<Batch> {
        self.rx.recv().ok()
    }
}

impl Drop for BatchIter {
    fn drop(&mut self) {
        // Unblock the producer by closing the channel, then wait for it.
        let (_, dummy) = sync_channel(1);
        drop(std::mem::replace(&mut self.rx, dummy));
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy(n: usize) -> Arc<dyn Dataset> {
        let x: Vec<f32> = (0..n * 4).map(|v| v as f32).collect();
        let y: Vec<i32> = (0..n as i32).collect();
        Arc::new(InMemory::new(x, &[1, 2, 2], y).expect("toy"))
    }

    #[test]
    fn batches_cover_every_sample_once_and_shuffle_reproducibly() {
        let dl = DataLoader::new(toy(10), 3).expect("loader").shuffle(5);
        assert_eq!(dl.len(), 4);
        let e0: Vec<Batch> = dl.epoch(0).collect();
        assert_eq!(
            e0.iter().map(|b| b.y.len()).collect::<Vec<_>>(),
            vec![3, 3, 3, 1]
        );
        let mut seen: Vec<i32> = e0.iter().flat_map(|b| b.y.clone()).collect();
        seen.sort();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        assert_eq!(
            e0,
            dl.epoch(0).collect::<Vec<_>>(),
            "same seed and epoch, same order"
        );
        assert_ne!(
            e0,
            dl.epoch(1).collect::<Vec<_>>(),
            "another epoch, another order"
        );
        let b = &e0[0];
        assert_eq!(b.x_shape, vec![3, 1, 2, 2]);
        assert_eq!(
            b.x[..4],
            [
                b.y[0] as f32 * 4.0,
                b.y[0] as f32 * 4.0 + 1.0,
                b.y[0] as f32 * 4.0 + 2.0,
                b.y[0] as f32 * 4.0 + 3.0
            ]
        );
        let dl = DataLoader::new(toy(10), 3).expect("loader").drop_last(true);
        assert_eq!(dl.epoch(0).count(), 3);
    }

    #[test]
    fn transforms_apply_and_validate() {
        let dl = DataLoader::new(toy(2), 2)
            .expect("loader")
            .transform(Transform::Scale(2.0))
            .expect("scale")
            .transform(Transform::Normalize {
                mean: vec![1.0],
                std: vec![2.0],
            })
            .expect("normalize")
            .transform(Transform::FlipHorizontal { p: 1.0 })
            .expect("flip");
        let b = dl.epoch(0).next().expect("batch");
        // Sample 0 = [0,1,2,3] → ×2 → (x−1)/2 = [-0.5, 0.5, 1.5, 2.5] → rows mirrored.
        assert_eq!(b.x[..4], [0.5, -0.5, 2.5, 1.5]);
        assert!(
            DataLoader::new(toy(2), 2)
                .expect("l")
                .transform(Transform::Normalize {
                    mean: vec![0.0, 0.0],
                    std: vec![1.0, 1.0]
                })
                .is_err()
        );
        assert!(
            DataLoader::new(toy(2), 2)
                .expect("l")
                .transform(Transform::FlipHorizontal { p: 2.0 })
                .is_err()
        );
        assert!(DataLoader::new(toy(2), 0).is_err());
        let crop = DataLoader::new(toy(4), 4)
            .expect("l")
            .transform(Transform::RandomCrop { pad: 1 })
            .expect("crop");
        let b = crop.epoch(3).next().expect("batch");
        assert!(b.x.iter().all(|v| *v == 0.0 || (0.0..16.0).contains(v)));
    }

    #[test]
    fn split_partitions_the_samples() {
        let d =
            InMemory::new((0..40).map(|v| v as f32).collect(), &[4], (0..10).collect()).expect("d");
        let (tr, te) = d.split(0.3, 1).expect("split");
        assert_eq!((tr.len(), te.len()), (7, 3));
        let mut all: Vec<i32> = (0..7)
            .map(|i| tr.label(i))
            .chain((0..3).map(|i| te.label(i)))
            .collect();
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert!(d.split(1.0, 0).is_err());
    }
}
