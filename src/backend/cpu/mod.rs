//! The built-in CPU backend: plain Rust on host memory, the reference implementation of every op.

mod attention;
mod conv;
mod depthwise;
mod dropout;
mod elementwise;
mod fused;
mod gemm;
mod norm;
mod pool;
mod reduce;
mod resize;
mod shape;
mod softmax;
mod unary;
mod update;

use std::any::Any;
use std::sync::RwLock;

use crate::contract::Backend;
use crate::device::{DeviceInfo, DeviceType};
use crate::error::{Error, Result};
use crate::memory::{Allocator, HostMem, Storage};

/// The largest single allocation the built-in device accepts (4 GiB).
const MAX_ALLOC: u64 = 4 << 30;

pub(crate) fn builtin_info(index: usize) -> DeviceInfo {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    DeviceInfo {
        index,
        platform: "netcl".into(),
        name: "netcl built-in CPU".into(),
        vendor: "netcl".into(),
        driver: env!("CARGO_PKG_VERSION").into(),
        version: "reference".into(),
        opencl_c_version: "none".into(),
        kind: DeviceType::Builtin,
        compute_units: cores,
        max_clock_mhz: 0,
        global_mem_bytes: MAX_ALLOC,
        local_mem_bytes: 0,
        local_mem_dedicated: false,
        max_alloc_bytes: MAX_ALLOC,
        max_work_group_size: 1,
        max_work_item_sizes: vec![1, 1, 1],
        fp16: true,
        fp64: true,
        unified_memory: true,
    }
}

/// Plain-Rust primitives on host memory.
pub(crate) struct CpuDevice;

impl CpuDevice {
    pub(crate) fn new() -> Self {
        CpuDevice
    }
}

fn lock_err() -> Error {
    Error::Invalid("host buffer lock poisoned".into())
}

impl Allocator for CpuDevice {
    fn alloc(&self, bytes: usize) -> Result<Storage> {
        if bytes as u64 > MAX_ALLOC {
            return Err(Error::Limit(format!(
                "allocation of {bytes} bytes exceeds the built-in device's {MAX_ALLOC} bytes"
            )));
        }
        let mut v = Vec::new();
        v.try_reserve_exact(bytes.div_ceil(4))
            .map_err(|_| Error::Limit(format!("the host could not allocate {bytes} bytes")))?;
        v.resize(bytes.div_ceil(4), 0u32);
        Ok(Storage::Host(HostMem {
            words: RwLock::new(v),
        }))
    }
}

impl Backend for CpuDevice {
    fn write(&self, dst: &Storage, offset: usize, data: &[u8]) -> Result<()> {
        let mut w = dst.host()?.words.write().map_err(|_| lock_err())?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut w[..]);
        let end = offset
            .checked_add(data.len())
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| Error::Invalid("write past buffer end".into()))?;
        bytes[offset..end].copy_from_slice(data);
        Ok(())
    }

    fn read(&self, src: &Storage, offset: usize, out: &mut [u8]) -> Result<()> {
        let w = src.host()?.words.read().map_err(|_| lock_err())?;
        let bytes: &[u8] = bytemuck::cast_slice(&w[..]);
        let end = offset
            .checked_add(out.len())
            .filter(|&e| e <= bytes.len())
            .ok_or_else(|| Error::Invalid("read past buffer end".into()))?;
        out.copy_from_slice(&bytes[offset..end]);
        Ok(())
    }

    fn fill(&self, dst: &Storage, pattern: [u8; 4], bytes: usize) -> Result<()> {
        let mut w = dst.host()?.words.write().map_err(|_| lock_err())?;
        let word = u32::from_ne_bytes(pattern);
        let n = (bytes / 4).min(w.len());
        w[..n].fill(word);
        Ok(())
    }

    fn copy(&self, src: &Storage, dst: &Storage, bytes: usize) -> Result<()> {
        let s = src.host()?.words.read().map_err(|_| lock_err())?;
        let mut d = dst.host()?.words.write().map_err(|_| lock_err())?;
        let n = bytes.div_ceil(4).min(s.len()).min(d.len());
        d[..n].copy_from_slice(&s[..n]);
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Locked access to built-in device tensors' host words.
pub(crate) mod access {
    use super::lock_err;
    use crate::{Result, Tensor};
    use std::sync::{RwLockReadGuard, RwLockWriteGuard};

    /// Read access to a host tensor's words.
    pub(crate) fn read(t: &Tensor) -> Result<RwLockReadGuard<'_, Vec<u32>>> {
        t.storage().host()?.words.read().map_err(|_| lock_err())
    }

    /// Write access to a host tensor's words.
    pub(crate) fn write(t: &Tensor) -> Result<RwLockWriteGuard<'_, Vec<u32>>> {
        t.storage().host()?.words.write().map_err(|_| lock_err())
    }
}

/// Host f32 views of built-in device tensors, for the reference implementations.
pub(crate) mod host {
    use super::access;
    use crate::half::{f16_to_f32, f32_to_f16};
    use crate::tensor::DType;
    use crate::{Result, Tensor};

    /// The elements of `t` widened to f32 (f16 exactly, i32 rounded to nearest).
    pub(crate) fn read_f32(t: &Tensor) -> Result<Vec<f32>> {
        let w = access::read(t)?;
        let n = t.numel();
        Ok(match t.dtype() {
            DType::F32 => bytemuck::cast_slice::<u32, f32>(&w[..])[..n].to_vec(),
            DType::I32 => bytemuck::cast_slice::<u32, i32>(&w[..])[..n]
                .iter()
                .map(|&v| v as f32)
                .collect(),
            DType::F16 => bytemuck::cast_slice::<u32, u16>(&w[..])[..n]
                .iter()
                .map(|&h| f16_to_f32(h))
                .collect(),
        })
    }

    /// Writes `v` into the float tensor `out`, rounding to nearest even where `out` is f16.
    pub(crate) fn write_f32(out: &Tensor, v: &[f32]) -> Result<()> {
        let mut w = access::write(out)?;
        let n = out.numel().min(v.len());
        match out.dtype() {
            DType::F16 => {
                let o = &mut bytemuck::cast_slice_mut::<u32, u16>(&mut w[..])[..n];
                for (o, &x) in o.iter_mut().zip(v) {
                    *o = f32_to_f16(x);
                }
            }
            _ => bytemuck::cast_slice_mut::<u32, f32>(&mut w[..])[..n].copy_from_slice(&v[..n]),
        }
        Ok(())
    }

    /// Calls `f(p, a, b)` for each of `planes` planes and each pixel (a, b) of an `oh`×`ow` output plane.
    pub(crate) fn each_pixel(
        planes: usize,
        oh: usize,
        ow: usize,
        mut f: impl FnMut(usize, usize, usize),
    ) {
        for p in 0..planes {
            for a in 0..oh {
                for b in 0..ow {
                    f(p, a, b);
                }
            }
        }
    }

    /// Writes `v` over the start of tensor `t`'s storage.
    pub(crate) fn write_pod<T: bytemuck::Pod>(t: &Tensor, v: &[T]) -> Result<()> {
        t.device()
            .backend()
            .write(t.storage(), 0, bytemuck::cast_slice(v))
    }

    /// Stores f64 accumulators into a host tensor as f32 (as many as both hold).
    pub(crate) fn store_f64(t: &Tensor, v: &[f64]) -> Result<()> {
        let mut w = access::write(t)?;
        let o = &mut bytemuck::cast_slice_mut::<u32, f32>(&mut w[..])[..t.numel()];
        for (d, s) in o.iter_mut().zip(v) {
            *d = *s as f32;
        }
        Ok(())
    }

    /// Runs `f` over the f32 elements of `inputs` and the output `out` (which must not alias an input). f16
    /// tensors are widened to f32 before and the output rounded back after, as the OpenCL kernels do per element.
    pub(crate) fn map_f32<R>(
        inputs: &[&Tensor],
        out: &Tensor,
        f: impl FnOnce(&[&[f32]], &mut [f32]) -> R,
    ) -> Result<R> {
        if out.dtype() == DType::F16 || inputs.iter().any(|t| t.dtype() == DType::F16) {
            let wide: Vec<Vec<f32>> = inputs.iter().map(|t| read_f32(t)).collect::<Result<_>>()?;
            let slices: Vec<&[f32]> = wide.iter().map(Vec::as_slice).collect();
            let mut o = crate::tensor::host_vec(out.numel(), 0f32)?;
            let r = f(&slices, &mut o);
            write_f32(out, &o)?;
            return Ok(r);
        }
        let guards: Vec<_> = inputs
            .iter()
            .map(|t| access::read(t))
            .collect::<Result<_>>()?;
        let slices: Vec<&[f32]> = guards
            .iter()
            .zip(inputs)
            .map(|(g, t)| &bytemuck::cast_slice::<u32, f32>(&g[..])[..t.numel()])
            .collect();
        let mut w = access::write(out)?;
        let n = out.numel();
        let o = &mut bytemuck::cast_slice_mut::<u32, f32>(&mut w[..])[..n];
        Ok(f(&slices, o))
    }
}
