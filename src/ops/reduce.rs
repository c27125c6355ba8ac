//! Reductions. The full sum is a two-stage reduction whose first stage is chosen by the autotuner: a
//! work-group tree (GPUs) or barrier-free float8 chunks per work-item (CPU OpenCL).

use serde::{Deserialize, Serialize};

use crate::autotune::{self, bucket, shape_key};
use crate::device::opencl::{Arg, events_ms};
use crate::device::{ClDevice, CpuDevice, Device};
use crate::error::{Error, Result};
use crate::program::Defines;
use crate::tensor::{DType, Tensor};

/// Device primitives for reductions.
pub(crate) trait ReduceKernels {
    /// Writes the sum of every element of `x` into the one-element `out`.
    fn sum_all(&self, device: &Device, x: &Tensor, out: &Tensor) -> Result<()>;
}

/// The sum of every element, as a rank-0 tensor. An empty tensor sums to 0.
pub fn sum_all(x: &Tensor) -> Result<Tensor> {
    x.expect_dtype(DType::F32, "sum_all")?;
    if x.numel() > i32::MAX as usize {
        return Err(Error::Limit(format!("sum_all: {} elements exceed the 2^31-1 per-op limit", x.numel())));
    }
    let out = Tensor::empty(x.device(), &[], DType::F32)?;
    x.device().kind().sum_all(x.device(), x, &out)?;
    Ok(out)
}

/// A first-stage strategy for the full sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum SumPlan {
    /// `groups` work-groups of `local` items with a local-memory tree.
    Wg { local: usize, groups: usize },
    /// `items` work-items, each summing one contiguous chunk with float8 loads.
    Chunk { items: usize },
}

impl SumPlan {
    /// The cache form: `["wg", local, groups]` or `["chunk", items]`.
    fn as_json(&self) -> serde_json::Value {
        match *self {
            SumPlan::Wg { local, groups } => serde_json::json!(["wg", local, groups]),
            SumPlan::Chunk { items } => serde_json::json!(["chunk", items]),
        }
    }
}

impl Serialize for Cand {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.as_json().serialize(s)
    }
}

#[derive(Clone, Copy)]
struct Cand(SumPlan);

impl ClDevice {
    /// Candidates depend only on the size bucket, so a cached winner stays valid for every size in it.
    fn sum_candidates(&self, n: usize) -> Vec<Cand> {
        let n = n.next_power_of_two();
        let cu = self.info.compute_units.max(1) as usize;
        let max_wg = self.info.max_work_group_size.max(1);
        let mut c = Vec::new();
        for local in [64usize, 128, 256] {
            if local <= max_wg {
                let groups = (n / (local * 16)).clamp(1, (cu * 8).max(64));
                c.push(Cand(SumPlan::Wg { local, groups }));
            }
        }
        for per_cu in [4usize, 16] {
            let items = (cu * per_cu).min(n.div_ceil(64)).max(1);
            c.push(Cand(SumPlan::Chunk { items }));
        }
        c
    }

    fn run_sum(&self, plan: SumPlan, device: &Device, x: &Tensor, out: &Tensor) -> Result<Vec<opencl3::event::Event>> {
        let n = x.numel();
        let defines = Defines::new();
        let (partials, count, ev1) = match plan {
            SumPlan::Wg { local, groups } => {
                let p = Tensor::empty(device, &[groups], DType::F32)?;
                let k = self.kernel("reduce", &defines, "sum_wg")?;
                let args = [Arg::I32(n as i32), Arg::Mem(x.storage()), Arg::Mem(p.storage()), Arg::Local(local * 4)];
                let e = self.launch(&k, &args, &[local * groups], Some(&[local]))?;
                (p, groups, e)
            }
            SumPlan::Chunk { items } => {
                let p = Tensor::empty(device, &[items], DType::F32)?;
                let chunk = n.div_ceil(items).div_ceil(8) * 8;
                let k = self.kernel("reduce", &defines, "sum_chunk")?;
                let args = [Arg::I32(n as i32), Arg::I32(chunk as i32), Arg::Mem(x.storage()), Arg::Mem(p.storage())];
                let e = self.launch(&k, &args, &[items], None)?;
                (p, items, e)
            }
        };
        let k = self.kernel("reduce", &defines, "sum_serial")?;
        let args = [Arg::I32(count as i32), Arg::Mem(partials.storage()), Arg::Mem(out.storage())];
        let ev2 = self.launch(&k, &args, &[1], Some(&[1]))?;
        Ok(vec![ev1, ev2])
    }
}

impl ReduceKernels for ClDevice {
    fn sum_all(&self, device: &Device, x: &Tensor, out: &Tensor) -> Result<()> {
        let n = x.numel();
        if n == 0 {
            return device.kind().fill(out.storage(), 0f32.to_ne_bytes(), 4);
        }
        let cands = self.sum_candidates(n);
        let key = shape_key(&[bucket(n)]);
        let chosen = autotune::tune(device, "sum_all", &key, &cands, 0, |c| events_ms(&self.run_sum(c.0, device, x, out)?))?;
        self.run_sum(chosen.0, device, x, out)?;
        Ok(())
    }
}

impl ReduceKernels for CpuDevice {
    fn sum_all(&self, _device: &Device, x: &Tensor, out: &Tensor) -> Result<()> {
        super::host::map_f32(&[x], out, |ins, o| {
            // The reference accumulates in f64.
            o[0] = ins[0].iter().map(|&v| v as f64).sum::<f64>() as f32;
        })
    }
}
