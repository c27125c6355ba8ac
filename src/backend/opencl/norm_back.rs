//! OpenCL training batch_norm2d backward: per-channel sums Σg and Σg·(x − mean) over chunks, then dx with the
//! channel's partials folded in, two launches in place of the composed path's reductions and elementwise
//! passes; the kernels are chosen by measurement per shape bucket.

use super::norm::{bn_choice, bn_key};
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::norm as abi;
use crate::backend::opencl::program::Defines;
use crate::backend::opencl::{Event, events_ms};
use crate::contract::norm::{ActGrad, BnBack, BnBackAlgo};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

impl ClDevice {
    /// The backward's candidates for (N, C, H·W) and the index of the unmeasured default: on devices with
    /// on-chip local memory, work-groups of 256 (and 512) items over chunks sized so that about four groups
    /// per compute unit run, and four times as many chunks; everywhere, one item per chunk (the CPU default).
    fn bnb_candidates(&self, v: [usize; 3]) -> (Vec<BnBackAlgo>, usize) {
        let [n, c, p] = v;
        let cu = self.info.compute_units.max(1) as usize;
        let max_wg = self.info.max_work_group_size.max(1);
        let per_channel = n * p;
        let mut out = Vec::new();
        if self.info.local_mem_dedicated {
            for local in [256usize, 512] {
                if local > max_wg {
                    continue;
                }
                let most = (per_channel / (local * 16)).max(1);
                let g = (cu * 4).div_ceil(c).clamp(1, most);
                for g in [g, (g * 4).min(most)] {
                    let a = BnBackAlgo::Wg(local, g);
                    if !out.contains(&a) {
                        out.push(a);
                    }
                }
            }
        }
        out.push(BnBackAlgo::Item((cu * 2).div_ceil(c).clamp(1, n.max(1))));
        let default = if self.info.kind == "cpu" {
            out.len() - 1
        } else {
            0
        };
        (out, default)
    }

    fn run_bnb(&self, device: &Device, bb: &BnBack<'_>, algo: BnBackAlgo) -> Result<Vec<Event>> {
        let s = bb.x.shape();
        let (n, c, p) = (s[0], s[1], s[2] * s[3]);
        let vec4 = p.is_multiple_of(4);
        let units = if vec4 { n * p / 4 } else { n * p };
        let g = match algo {
            BnBackAlgo::Wg(_, g) | BnBackAlgo::Item(g) => g.max(1),
            BnBackAlgo::Composed => {
                return Err(Error::Invalid(
                    "batch_norm2d_backward: the composed path has no kernels of its own".into(),
                ));
            }
        };
        let part = Tensor::empty(device, &[c * g * 2], DType::F32)?;
        let gamma = bb.gamma.unwrap_or(bb.rstd).storage();
        // The activation's gradient as MASK (1 ReLU, 2 clamp) with its bounds; without one, h is never read.
        let (mask, lo, hi, h) = match bb.act {
            None => (0, 0.0, 0.0, bb.g),
            Some((ActGrad::Relu, h)) => (1, 0.0, 0.0, h),
            Some((ActGrad::Clamp(lo, hi), h)) => (2, lo, hi, h),
        };
        let h = h.storage();
        let has_gamma = i32::from(bb.gamma.is_some());
        let (n32, c32, p32, g32) = (n as i32, c as i32, p as i32, g as i32);
        let mut evs = Vec::with_capacity(2);
        match algo {
            BnBackAlgo::Wg(local, _) => {
                let local = local.min(self.info.max_work_group_size.max(1));
                let d = Defines::new()
                    .set("VEC4", u8::from(vec4))
                    .set("UNR", 4)
                    .set("MASK", mask);
                let rc = units.div_ceil(g).max(1) as i32;
                let k = self.kernel(abi::FAMILY, &d, abi::BN_BACK_PARTIAL_WG)?;
                let args = abi::BnBackPartialWg {
                    N: n32,
                    C: c32,
                    P: p32,
                    rc,
                    G: g32,
                    lo,
                    hi,
                    x: bb.x.storage(),
                    gr: bb.g.storage(),
                    h,
                    mean: bb.mean.storage(),
                    part: part.storage(),
                    ls: local * 4,
                    lq: local * 4,
                };
                evs.push(self.run(&k, &args, &[local * g, c], Some(&[local, 1]))?);
                let k = self.kernel(abi::FAMILY, &d, abi::BN_BACK_APPLY_BACK)?;
                let args = abi::BnBackApplyBack {
                    N: n32,
                    C: c32,
                    P: p32,
                    rc,
                    G: g32,
                    has_gamma,
                    lo,
                    hi,
                    x: bb.x.storage(),
                    gr: bb.g.storage(),
                    h,
                    mean: bb.mean.storage(),
                    rstd: bb.rstd.storage(),
                    gamma,
                    part: part.storage(),
                    dx: bb.dx.storage(),
                    dgamma: bb.dgamma.storage(),
                    dbeta: bb.dbeta.storage(),
                };
                evs.push(self.run(&k, &args, &[local * g, c], Some(&[local, 1]))?);
            }
            BnBackAlgo::Item(_) => {
                let rc = (n * p).div_ceil(g).max(1) as i32;
                let d = Defines::new().set("MASK", mask);
                let k = self.kernel(abi::FAMILY, &d, abi::BN_BACK_PARTIAL_ITEM)?;
                let args = abi::BnBackPartialItem {
                    N: n32,
                    C: c32,
                    P: p32,
                    rc,
                    G: g32,
                    lo,
                    hi,
                    x: bb.x.storage(),
                    gr: bb.g.storage(),
                    h,
                    mean: bb.mean.storage(),
                    part: part.storage(),
                };
                evs.push(self.run(&k, &args, &[g, c], None)?);
                let k = self.kernel(abi::FAMILY, &d, abi::BN_BACK_APPLY_PLANE)?;
                let args = abi::BnBackApplyPlane {
                    planes: (n * c) as i32,
                    C: c32,
                    P: p32,
                    G: g32,
                    N: n32,
                    has_gamma,
                    lo,
                    hi,
                    x: bb.x.storage(),
                    gr: bb.g.storage(),
                    h,
                    mean: bb.mean.storage(),
                    rstd: bb.rstd.storage(),
                    gamma,
                    part: part.storage(),
                    dx: bb.dx.storage(),
                    dgamma: bb.dgamma.storage(),
                    dbeta: bb.dbeta.storage(),
                };
                evs.push(self.run(&k, &args, &[n * c], None)?);
            }
            BnBackAlgo::Composed => unreachable!("refused above"),
        }
        Ok(evs)
    }

    /// Training batch_norm2d's backward on this device's kernels (always: the composed path is the caller's,
    /// taken only when forced or on the built-in device).
    pub(super) fn batch_norm_backward_kernels(
        &self,
        device: &Device,
        bb: &BnBack<'_>,
    ) -> Result<bool> {
        if bb.algo == Some(BnBackAlgo::Composed) {
            return Ok(false);
        }
        let s = bb.x.shape();
        let v = [s[0], s[1], s[2] * s[3]];
        let key = bn_key(
            "batch_norm2d_backward",
            v,
            &[("act", i64::from(bb.act.is_some()))],
        );
        let max_wg = self.info.max_work_group_size.max(1);
        let misfit = |a: &BnBackAlgo| {
            let ok = match *a {
                BnBackAlgo::Wg(l, g) => l.is_power_of_two() && l <= max_wg && g >= 1,
                BnBackAlgo::Item(g) => g >= 1,
                BnBackAlgo::Composed => true,
            };
            (!ok).then(|| format!(
                "batch_norm2d_backward: algorithm {a:?} is not valid here (work-groups need a power-of-two size up to {max_wg}, at least one chunk per channel)"
            ))
        };
        let chosen = bn_choice(
            device,
            &key,
            bb.algo,
            misfit,
            || self.bnb_candidates(v),
            |a| events_ms(&self.run_bnb(device, bb, *a)?),
        )?;
        self.run_bnb(device, bb, chosen)?;
        Ok(true)
    }
}
