//! [`Tensor`]: a shape, a dtype and contiguous row-major storage on one device.
//!
//! Tensors are cheap to clone (the storage is shared). [`Tensor::reshape`] returns a view of the same storage;
//! every other shape change copies. Host transfers are blocking, so host memory is never read after it is
//! freed.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{Buffer, Storage};

/// Element types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 32-bit float, the working type of every op.
    F32,
    /// 32-bit signed integer (labels, indices).
    I32,
    /// 16-bit IEEE float, for storage: on every device (kernels read it with `vload_half` and write it with
    /// `vstore_half_rte`, core OpenCL C 1.2, so no `cl_khr_fp16` is needed) and computed with in f32.
    F16,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 => 2,
        }
    }

    /// The name used in messages and in the playground (`f32`, `i32`, `f16`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::F16 => "f16",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that a tensor can hold.
pub trait Element: bytemuck::Pod + Send + Sync {
    /// The matching dtype.
    const DTYPE: DType;
}
impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}

/// Number of elements of `shape`, or a shape error if the product overflows.
pub fn numel(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            Error::Shape(format!(
                "shape {shape:?} has more elements than fit in memory"
            ))
        })
}

/// A host vector of `n` copies of `fill`; `Error::Limit` when the host cannot allocate it, where `vec!` would
/// abort the process.
pub(crate) fn host_vec<T: Clone>(n: usize, fill: T) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::Limit(format!(
            "the host could not allocate {n} elements of {} bytes",
            std::mem::size_of::<T>()
        ))
    })?;
    v.resize(n, fill);
    Ok(v)
}

/// Row-major strides of `shape`, in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// A dense, contiguous, row-major array on a device.
#[derive(Clone)]
pub struct Tensor {
    shape: Arc<[usize]>,
    dtype: DType,
    numel: usize,
    buf: Arc<Buffer>,
    device: Device,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor({:?}, {}, on {})",
            &*self.shape,
            self.dtype,
            self.device.name()
        )
    }
}

impl Tensor {
    /// An uninitialised tensor from the device's pool. Every op writes all of its output.
    pub(crate) fn empty(device: &Device, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let n = numel(shape)?;
        let bytes = n.checked_mul(dtype.size()).ok_or_else(|| {
            Error::Limit(format!(
                "shape {shape:?} of {dtype} exceeds the address space"
            ))
        })?;
        let max = device.info().max_alloc_bytes;
        if max > 0 && bytes as u64 > max {
            return Err(Error::Limit(format!(
                "shape {shape:?} of {dtype} needs {bytes} bytes; the device's largest allocation is {max} bytes ({})",
                device.name()
            )));
        }
        let buf = device.pool().allocate(device.backend(), bytes)?;
        Ok(Tensor {
            shape: shape.into(),
            dtype,
            numel: n,
            buf: Arc::new(buf),
            device: device.clone(),
        })
    }

    /// A tensor holding a copy of `data`, which must have exactly `numel(shape)` elements.
    pub fn from_slice<T: Element>(device: &Device, data: &[T], shape: &[usize]) -> Result<Tensor> {
        let n = numel(shape)?;
        if n != data.len() {
            return Err(Error::Shape(format!(
                "shape {shape:?} holds {n} elements, but {} were given",
                data.len()
            )));
        }
        let t = Tensor::empty(device, shape, T::DTYPE)?;
        device
            .backend()
            .write(t.storage(), 0, bytemuck::cast_slice(data))?;
        Ok(t)
    }

    /// A tensor filled with `value`.
    pub fn full(device: &Device, shape: &[usize], value: f32) -> Result<Tensor> {
        let t = Tensor::empty(device, shape, DType::F32)?;
        device
            .backend()
            .fill(t.storage(), value.to_ne_bytes(), t.numel * 4)?;
        Ok(t)
    }

    /// A tensor of `dtype` filled with zeros.
    pub fn zeros_dtype(device: &Device, shape: &[usize], dtype: DType) -> Result<Tensor> {
        let t = Tensor::empty(device, shape, dtype)?;
        device.backend().fill(
            t.storage(),
            [0; 4],
            (t.numel * dtype.size()).div_ceil(4) * 4,
        )?;
        Ok(t)
    }

    /// An f32 tensor of zeros.
    pub fn zeros(device: &Device, shape: &[usize]) -> Result<Tensor> {
        Tensor::zeros_dtype(device, shape, DType::F32)
    }

    /// An f32 tensor of ones.
    pub fn ones(device: &Device, shape: &[usize]) -> Result<Tensor> {
        Tensor::full(device, shape, 1.0)
    }

    /// `start, start+step, …` below `end` (f32), like `numpy.arange`.
    pub fn arange(device: &Device, start: f32, end: f32, step: f32) -> Result<Tensor> {
        if !(start.is_finite() && end.is_finite() && step.is_finite()) || step == 0.0 {
            return Err(Error::Invalid(format!(
                "arange({start}, {end}, {step}): bounds must be finite and step non-zero"
            )));
        }
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        Tensor::from_fn(device, &[n], |i| start + i as f32 * step)
    }

    /// An f32 tensor whose element `i` is `f(i)`, computed on the host. The device memory is taken first and
    /// the host buffer with `try_reserve`, so a size no memory holds is `Error::Limit`, never an abort.
    fn from_fn(device: &Device, shape: &[usize], f: impl Fn(usize) -> f32) -> Result<Tensor> {
        let t = Tensor::empty(device, shape, DType::F32)?;
        let mut v = host_vec(t.numel, 0f32)?;
        for (i, x) in v.iter_mut().enumerate() {
            *x = f(i);
        }
        device
            .backend()
            .write(t.storage(), 0, bytemuck::cast_slice(&v))?;
        Ok(t)
    }

    /// Normally distributed values with `mean` and `std`, from a counter-based generator seeded by `seed`.
    ///
    /// The values depend only on the seed and the element index, so every device gets the same tensor.
    pub fn randn(
        device: &Device,
        shape: &[usize],
        mean: f32,
        std: f32,
        seed: u64,
    ) -> Result<Tensor> {
        if !(mean.is_finite() && std.is_finite()) || std < 0.0 {
            return Err(Error::Invalid(format!(
                "randn: mean {mean} and std {std} must be finite, std ≥ 0"
            )));
        }
        Tensor::from_fn(device, shape, |i| {
            mean + std * crate::rng::normal(seed, i as u64)
        })
    }

    /// Uniform values in `[low, high)`, from a counter-based generator seeded by `seed`.
    pub fn rand_uniform(
        device: &Device,
        shape: &[usize],
        low: f32,
        high: f32,
        seed: u64,
    ) -> Result<Tensor> {
        if !(low.is_finite() && high.is_finite()) || high < low {
            return Err(Error::Invalid(format!(
                "rand_uniform: bounds [{low}, {high}) must be finite with low ≤ high"
            )));
        }
        Tensor::from_fn(device, shape, |i| {
            low + (high - low) * crate::rng::uniform(seed, i as u64)
        })
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.numel
    }

    /// The device holding the storage.
    pub fn device(&self) -> &Device {
        &self.device
    }

    pub(crate) fn storage(&self) -> &Storage {
        self.buf.storage()
    }

    /// Whether two tensors share storage (one is a reshape of the other).
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.buf, &other.buf)
    }

    /// The elements as a host vector; the dtype must match `T`.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if self.dtype != T::DTYPE {
            return Err(Error::DTypeMismatch {
                op: format!("to_vec::<{}>", T::DTYPE),
                expected: T::DTYPE.name(),
                got: self.dtype.name(),
            });
        }
        let mut out = host_vec(self.numel, T::zeroed())?;
        self.device
            .backend()
            .read(self.storage(), 0, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    /// The elements converted to f32 (from any dtype).
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        match self.dtype {
            DType::F32 => self.to_vec::<f32>(),
            DType::I32 => Ok(self
                .to_vec::<i32>()?
                .into_iter()
                .map(|v| v as f32)
                .collect()),
            DType::F16 => {
                let mut raw = host_vec(self.numel, 0u16)?;
                self.device.backend().read(
                    self.storage(),
                    0,
                    bytemuck::cast_slice_mut(&mut raw),
                )?;
                Ok(raw.into_iter().map(crate::half::f16_to_f32).collect())
            }
        }
    }

    /// A view with another shape of the same number of elements; shares storage.
    ///
    /// One dimension may be `usize::MAX` (written `-1` in the playground), inferred from the rest.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        let shape = infer_shape(shape, self.numel)?;
        Ok(Tensor {
            shape: shape.into(),
            ..self.clone()
        })
    }

    /// A copy of this tensor on `device` (or a clone when it already lives there).
    pub fn to_device(&self, device: &Device) -> Result<Tensor> {
        if *device == self.device {
            return Ok(self.clone());
        }
        let bytes = self.numel * self.dtype.size();
        let mut host = host_vec(bytes.div_ceil(4) * 4, 0u8)?;
        self.device
            .backend()
            .read(self.storage(), 0, &mut host[..bytes])?;
        let t = Tensor::empty(device, &self.shape, self.dtype)?;
        device.backend().write(t.storage(), 0, &host[..bytes])?;
        Ok(t)
    }

    /// A copy on the same device with its own storage.
    pub fn deep_clone(&self) -> Result<Tensor> {
        let t = Tensor::empty(&self.device, &self.shape, self.dtype)?;
        self.device
            .backend()
            .copy(self.storage(), t.storage(), self.numel * self.dtype.size())?;
        Ok(t)
    }

    /// Overwrites this tensor's elements with `src`'s (same shape and dtype; any device). Every view of this
    /// storage sees the new values; on a mismatch nothing changes.
    pub fn assign(&self, src: &Tensor) -> Result<()> {
        if src.shape() != self.shape() {
            return Err(Error::shape_mismatch("assign", self.shape(), src.shape()));
        }
        if src.dtype != self.dtype {
            return Err(Error::DTypeMismatch {
                op: "assign".into(),
                expected: self.dtype.name(),
                got: src.dtype.name(),
            });
        }
        let bytes = self.numel * self.dtype.size();
        if src.shares_storage(self) || bytes == 0 {
            return Ok(());
        }
        if src.device == self.device {
            return self
                .device
                .backend()
                .copy(src.storage(), self.storage(), bytes);
        }
        let mut host = host_vec(bytes, 0u8)?;
        src.device.backend().read(src.storage(), 0, &mut host)?;
        self.device.backend().write(self.storage(), 0, &host)
    }

    /// Converts to `dtype` with a kernel on the device (no host round trip). To f16: round to nearest even,
    /// above 65504 infinity, NaN kept. To i32: truncated towards zero and saturated, NaN giving 0.
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        if self.numel > i32::MAX as usize {
            return Err(Error::Limit(format!(
                "cast: {} elements exceed the kernels' limit of {}",
                self.numel,
                i32::MAX
            )));
        }
        let t = Tensor::empty(&self.device, &self.shape, dtype)?;
        if self.numel > 0 {
            self.device.backend().cast(self, &t)?;
        }
        Ok(t)
    }

    /// Checks that every tensor lives on the same device as `self`.
    pub(crate) fn same_device(&self, others: &[&Tensor], op: &str) -> Result<()> {
        for o in others {
            if o.device != self.device {
                return Err(Error::DeviceMismatch {
                    op: op.to_owned(),
                    left: self.device.name().to_owned(),
                    right: o.device.name().to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Fails unless the dtype is `want`.
    pub(crate) fn expect_dtype(&self, want: DType, op: &str) -> Result<()> {
        if self.dtype != want {
            return Err(Error::DTypeMismatch {
                op: op.to_owned(),
                expected: want.name(),
                got: self.dtype.name(),
            });
        }
        Ok(())
    }
}

/// Resolves one `usize::MAX` placeholder dimension and checks the element count.
fn infer_shape(shape: &[usize], n: usize) -> Result<Vec<usize>> {
    let holes = shape.iter().filter(|&&d| d == usize::MAX).count();
    if holes > 1 {
        return Err(Error::Shape(format!(
            "reshape: at most one inferred dimension, got {holes}"
        )));
    }
    let mut out = shape.to_vec();
    if holes == 1 {
        let known: usize = numel(
            &shape
                .iter()
                .copied()
                .filter(|&d| d != usize::MAX)
                .collect::<Vec<_>>(),
        )?;
        if known == 0 || !n.is_multiple_of(known) {
            return Err(Error::Shape(format!(
                "reshape: cannot infer a dimension of {shape:?} for {n} elements"
            )));
        }
        for d in &mut out {
            if *d == usize::MAX {
                *d = n / known;
            }
        }
    }
    let m = numel(&out)?;
    if m != n {
        return Err(Error::Shape(format!(
            "reshape: {n} elements cannot be viewed as shape {out:?} ({m} elements)"
        )));
    }
    Ok(out)
}
