//! OpenCL reductions: pass algorithms chosen by measurement per shape bucket, the `reduce` kernels, argmax and
//! argmin, `reduce_to_shape` and the final square root of the global L2 norm.

use std::collections::HashSet;
use std::sync::Mutex;

use super::elementwise::{grid_3d, grid_defines, half_defines};
use crate::autotune::{self, Source, TuneKey, bucket};
use crate::backend::opencl::abi::reduce as abi;
use crate::backend::opencl::program::{Defines, kernel_source, quick_key};
use crate::backend::opencl::{ClDevice, events_ms};
use crate::contract::ReduceKernels;
use crate::contract::reduce::{Ori, ReduceAlgo, ReduceOp, ReducePass, RtsAlgo, RtsPlan, ToShape};
use crate::device::Device;
use crate::error::Result;
use crate::tensor::{DType, Tensor};

/// The build of one pass; `first` applies the op's pre-map (the square of the sum of squares).
fn reduce_defines(op: ReduceOp, first: bool) -> Defines {
    let (comb, ident) = match op {
        ReduceOp::Sum | ReduceOp::Mean | ReduceOp::SumSq => ("((a)+(b))", "0.0f"),
        ReduceOp::Prod => ("((a)*(b))", "1.0f"),
        ReduceOp::Max => (
            "select(fmax((a),(b)),(a)+(b),isnan(a)|isnan(b))",
            "(-INFINITY)",
        ),
        ReduceOp::Min => (
            "select(fmin((a),(b)),(a)+(b),isnan(a)|isnan(b))",
            "INFINITY",
        ),
    };
    let pre = if first && op == ReduceOp::SumSq {
        "((v)*(v))"
    } else {
        "(v)"
    };
    // Sums are compensated in the serial column loop, whose length is the whole reduced extent.
    let kahan = matches!(op, ReduceOp::Sum | ReduceOp::Mean | ReduceOp::SumSq);
    Defines::new()
        .set("COMB(a,b)", comb)
        .set("IDENT", ident)
        .set("PRE(v)", pre)
        .set("KAHAN", u8::from(kahan))
}

fn once_per_key(key: &str) -> bool {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    match SEEN.lock() {
        Ok(mut g) => g.get_or_insert_with(HashSet::new).insert(key.to_owned()),
        Err(_) => false,
    }
}

/// Records `a` as the algorithm the caller forced for `key`.
pub(crate) fn record_forced<C: serde::Serialize>(device: &Device, key: &TuneKey, a: &C) {
    let why = "algorithm given by the caller";
    autotune::record_choice(device, key, a, Source::Forced, why);
}

fn int8(v: &[usize]) -> [i32; 8] {
    let mut out = [1i32; 8];
    for (i, x) in v.iter().enumerate() {
        out[i] = *x as i32;
    }
    out
}

impl ClDevice {
    /// Candidates for one pass; they depend only on the bucketed key (O, R, I, largest of 32/8/4 dividing I).
    fn reduce_candidates(&self, v: Ori) -> (Vec<ReduceAlgo>, usize) {
        let (o, r, i) = (
            bucket(v.o) as usize,
            bucket(v.r) as usize,
            bucket(v.i) as usize,
        );
        let cu = self.info.compute_units.max(1) as usize;
        let max_wg = self.info.max_work_group_size.max(1);
        let cpu = self.info.kind == "cpu";
        let mut c = Vec::new();
        if v.i == 1 {
            for local in [64usize, 128, 256] {
                if local <= max_wg {
                    // Enough groups to fill the device, each reading at least 4 float4 per item.
                    let g = (cu * 16).div_ceil(o).clamp(1, (r / (local * 16)).max(1));
                    c.push(ReduceAlgo::Wg(local, g));
                }
            }
            if 256 <= max_wg {
                // Few work-groups per compute unit, each streaming a long chunk (large rows on GPUs).
                let g = (cu * 4).div_ceil(o).clamp(1, (r / (256 * 16)).max(1));
                if !c.contains(&ReduceAlgo::Wg(256, g)) {
                    c.push(ReduceAlgo::Wg(256, g));
                }
            }
            let g = (cu * 4).div_ceil(o).clamp(1, (r / 256).max(1));
            c.push(ReduceAlgo::Chunk(g));
            if g > 1 {
                c.push(ReduceAlgo::Chunk(
                    ((cu * 16).div_ceil(o)).clamp(1, (r / 256).max(1)),
                ));
            }
            let default = if cpu {
                c.iter().position(|a| matches!(a, ReduceAlgo::Chunk(_)))
            } else {
                c.iter().rposition(|a| matches!(a, ReduceAlgo::Wg(..)))
            };
            let default = default.unwrap_or(0);
            (c, default)
        } else {
            let vecs: &[usize] = if v.i.is_multiple_of(4) { &[1, 4] } else { &[1] };
            for &vec in vecs {
                let items = (o * i / vec).max(1);
                // About 1024 work-items per compute unit keep a GPU's memory system busy.
                let g = (cu * 1024).div_ceil(items).clamp(1, (r / 16).max(1));
                c.push(ReduceAlgo::Col(vec, 1));
                if g > 1 {
                    c.push(ReduceAlgo::Col(vec, g));
                }
            }
            // Column blocks of 32 or 8 for CPU OpenCL, whole rows split into chunks for parallelism.
            for cols in [32usize, 8] {
                if v.i.is_multiple_of(cols) {
                    let items = (o * i / cols).max(1);
                    c.push(ReduceAlgo::ColBlk(cols, 1));
                    let g = (cu * 8).div_ceil(items).clamp(1, (r / 16).max(1));
                    if g > 1 {
                        c.push(ReduceAlgo::ColBlk(cols, g));
                    }
                    break;
                }
            }
            if v.i.is_multiple_of(8) {
                // At least two chunks and at most 1024 rows each, so no partial sums more than 1024 rows.
                let g = (cu * 4).max(r.div_ceil(1024)).clamp(2, r.max(2));
                c.push(ReduceAlgo::Stream(g));
            }
            let default = if cpu {
                c.iter()
                    .position(|a| matches!(a, ReduceAlgo::Stream(..) | ReduceAlgo::ColBlk(..)))
                    .unwrap_or(0)
            } else {
                c.iter()
                    .rposition(|a| matches!(a, ReduceAlgo::Col(..)))
                    .unwrap_or(0)
            };
            (c, default)
        }
    }

    /// Runs pass `p` with `algo`: in one launch, or in two when the algorithm splits R into groups (partials
    /// [O, G, I], then a fold of G with the same kind of kernel).
    fn run_pass(
        &self,
        device: &Device,
        p: ReducePass<'_>,
        algo: ReduceAlgo,
    ) -> Result<Vec<crate::backend::opencl::Event>> {
        let v = p.v;
        let g = algo.groups().min(v.r.max(1));
        if g == 1 {
            return Ok(vec![self.launch_pass(p, 1, algo)?]);
        }
        let partial = Tensor::empty(device, &[v.o * g * v.i], DType::F32)?;
        let stage1 = ReducePass {
            scale: 1.0,
            out: &partial,
            out_off: 0,
            ..p
        };
        let e1 = self.launch_pass(stage1, g, algo)?;
        let second = match algo {
            ReduceAlgo::Wg(l, _) => ReduceAlgo::Wg(l.min(g.next_power_of_two()).max(1), 1),
            ReduceAlgo::Chunk(_) => ReduceAlgo::Chunk(1),
            ReduceAlgo::Col(vec, _) => ReduceAlgo::Col(vec, 1),
            ReduceAlgo::ColBlk(cols, _) => ReduceAlgo::ColBlk(cols, 1),
            ReduceAlgo::Stream(_) => ReduceAlgo::ColBlk(8, 1),
        };
        let stage2 = ReducePass {
            op: p.op.rest(),
            first: false,
            v: Ori { r: g, ..v },
            x: &partial,
            ..p
        };
        let e2 = self.launch_pass(stage2, 1, second)?;
        Ok(vec![e1, e2])
    }

    /// One launch of pass `p` with `algo`, R split into `g` groups.
    fn launch_pass(
        &self,
        p: ReducePass<'_>,
        g: usize,
        algo: ReduceAlgo,
    ) -> Result<crate::backend::opencl::Event> {
        let (op, first, v, scale, x, out, out_off, _) = p.parts();
        let rc = v.r.div_ceil(g).max(1);
        let half = x.dtype() == DType::F16;
        let defines = half_defines(reduce_defines(op, first), &[("IN_HALF", x)]);
        // The column kernels (red_col, red_col_blk, red_col_stream) share one parameter list.
        let col = abi::RedCol {
            O: v.o as i32,
            R: v.r as i32,
            I: v.i as i32,
            rc: rc as i32,
            G: g as i32,
            scale,
            x: x.storage(),
            out: out.storage(),
            out_off: out_off as i32,
        };
        match algo {
            ReduceAlgo::Wg(local, _) if v.i == 1 => {
                let local = local.min(self.info.max_work_group_size.max(1));
                // Rows of a multiple of 4 with chunks rounded up to a multiple of 4 load aligned float4.
                let align = v.r.is_multiple_of(4) && !half;
                let rc = if align { rc.next_multiple_of(4) } else { rc };
                let defines = defines.set("ALIGN4", u8::from(align));
                let k = self.kernel(abi::FAMILY, &defines, abi::RED_ROW_WG)?;
                let args = abi::RedRowWg {
                    O: v.o as i32,
                    R: v.r as i32,
                    rc: rc as i32,
                    G: g as i32,
                    scale,
                    x: x.storage(),
                    out: out.storage(),
                    out_off: out_off as i32,
                    sc: local * 4,
                };
                self.run(&k, &args, &[local * g, v.o.min(65535)], Some(&[local, 1]))
            }
            ReduceAlgo::Chunk(_) if v.i == 1 => {
                let k = self.kernel(abi::FAMILY, &defines, abi::RED_ROW_CHUNK)?;
                let total = v.o * g;
                let args = abi::RedRowChunk {
                    R: v.r as i32,
                    rc: rc as i32,
                    G: g as i32,
                    total: total as i32,
                    scale,
                    x: x.storage(),
                    out: out.storage(),
                    out_off: out_off as i32,
                };
                self.run(&k, &args, &[total], None)
            }
            ReduceAlgo::Stream(_) if v.i > 1 && v.i.is_multiple_of(8) => {
                let k = self.kernel(abi::FAMILY, &defines, abi::RED_COL_STREAM)?;
                let total = v.o * g;
                self.run(&k, &col, &[total], None)
            }
            ReduceAlgo::ColBlk(cols, _)
                if v.i > 1 && (cols == 8 || cols == 32) && v.i.is_multiple_of(cols) =>
            {
                let gr = [v.i / cols, g, v.o];
                let (gr, local, capped) = grid_3d(self, gr);
                let d = grid_defines(&defines.set("NB", cols / 8), capped);
                let k = self.kernel(abi::FAMILY, &d, abi::RED_COL_BLK)?;
                self.run(&k, &col, &gr, Some(&local))
            }
            _ => {
                let vec = match algo {
                    ReduceAlgo::Col(4, _) if v.i.is_multiple_of(4) => 4,
                    _ => 1,
                };
                let gr = [v.i / vec, g, v.o];
                let (gr, local, capped) = grid_3d(self, gr);
                let d = grid_defines(&defines.set("V", vec), capped);
                let k = self.kernel(abi::FAMILY, &d, abi::RED_COL)?;
                self.run(&k, &col, &gr, Some(&local))
            }
        }
    }
}

/// The kept and reduced axes of a `reduce_to_shape` plan as its kernels take them: (nk, kshape, kstride, nr,
/// rshape, rstride).
fn rts_axes(plan: &RtsPlan) -> (i32, [i32; 8], [i32; 8], i32, [i32; 8], [i32; 8]) {
    (
        plan.kshape.len() as i32,
        int8(&plan.kshape),
        int8(&plan.kstride),
        plan.rshape.len() as i32,
        int8(&plan.rshape),
        int8(&plan.rstride),
    )
}

impl ClDevice {
    fn rts_candidates(&self, total: usize, plan: &RtsPlan) -> Vec<RtsAlgo> {
        let cu = self.info.compute_units.max(1) as usize;
        // Chunks are whole runs of the innermost reduced axis when it is long, else 256-element stretches.
        let chunks = match plan.rshape.first() {
            Some(&inner) if inner >= 256 => plan.r / inner,
            _ => plan.r / 256,
        }
        .max(1);
        let mut c = vec![RtsAlgo::Wg(1)];
        for per_cu in [4usize, 16] {
            let g = (cu * per_cu).div_ceil(total).clamp(1, chunks);
            if !c.contains(&RtsAlgo::Wg(g)) {
                c.push(RtsAlgo::Wg(g));
            }
        }
        // Flattened slices of at least 4·256 elements each: two, four or eight groups per compute unit.
        let slices = (plan.r / 1024).max(1);
        for per_cu in [2usize, 4, 8] {
            let g = (cu * per_cu).div_ceil(total).clamp(1, slices);
            if !c.contains(&RtsAlgo::Flat(g)) {
                c.push(RtsAlgo::Flat(g));
            }
        }
        c
    }

    fn run_rts(
        &self,
        device: &Device,
        r: ToShape<'_>,
        algo: RtsAlgo,
    ) -> Result<Vec<crate::backend::opencl::Event>> {
        let (grad, out, plan, _) = r.parts();
        let total = out.numel();
        let g = match algo {
            RtsAlgo::Wg(g) | RtsAlgo::Flat(g) => g.max(1),
            RtsAlgo::Item => 1,
        };
        let flat = matches!(algo, RtsAlgo::Flat(_));
        // float4 loads: the innermost reduced axis is contiguous and every offset a multiple of 4; rts_wg also
        // needs that axis to be at least 256 long, the flat kernel takes short rows too.
        let inner = plan.rshape.first().copied().unwrap_or(1);
        let v4 = inner.is_multiple_of(4)
            && (flat || inner >= 256)
            && plan.rstride.first() == Some(&1)
            && plan.rstride.iter().skip(1).all(|s| s.is_multiple_of(4))
            && plan.kstride.iter().all(|s| s.is_multiple_of(4));
        // Found by a compact key: a repeated call (every backward step of a bias) writes no defines.
        let d = || Defines::new().set("RTS_V4", u8::from(v4));
        let partial = if g > 1 {
            Some(Tensor::empty(device, &[total * g], DType::F32)?)
        } else {
            None
        };
        let dst = partial.as_ref().unwrap_or(out);
        let (nk, kshape, kstride, nr, rshape, rstride) = rts_axes(plan);
        let (r, groups) = (plan.r as i32, g as i32);
        let (grad, global) = (grad.storage(), [total * g * 256]);
        let first = if flat {
            let k = self.kernel_by(quick_key(abi::FAMILY, abi::RTS_FLAT, &[usize::from(v4)]), d)?;
            let units = if v4 { plan.r / 4 } else { plan.r };
            let rc = units.div_ceil(g) as i32;
            let out = dst.storage();
            let args = abi::RtsFlat {
                nk,
                kshape,
                kstride,
                nr,
                rshape,
                rstride,
                R: r,
                G: groups,
                rc,
                grad,
                out,
            };
            self.run(&k, &args, &global, Some(&[256]))?
        } else {
            let k = self.kernel_by(quick_key(abi::FAMILY, abi::RTS_WG, &[usize::from(v4)]), d)?;
            let out = dst.storage();
            let args = abi::RtsWg {
                nk,
                kshape,
                kstride,
                nr,
                rshape,
                rstride,
                R: r,
                G: groups,
                grad,
                out,
            };
            self.run(&k, &args, &global, Some(&[256]))?
        };
        let mut evs = vec![first];
        if let Some(p) = &partial {
            let k = self.kernel_by(quick_key(abi::FAMILY, abi::RTS_FOLD, &[]), Defines::new)?;
            let args = abi::RtsFold {
                total: total as i32,
                G: g as i32,
                part: p.storage(),
                out: out.storage(),
            };
            evs.push(self.launch_1d(&k, &args, total, Some(64))?);
        }
        Ok(evs)
    }
}

impl ReduceKernels for ClDevice {
    fn reduce_pass(&self, device: &Device, p: ReducePass<'_>) -> Result<()> {
        let (v, x, algo) = (p.v, p.x, p.algo);
        let mut fields = vec![
            ("o", bucket(v.o)),
            ("r", bucket(v.r)),
            ("i", bucket(v.i)),
            // The largest of 32, 8, 4 dividing I: column candidates depend on it.
            (
                "i_multiple",
                [32i64, 8, 4]
                    .into_iter()
                    .find(|&m| v.i.is_multiple_of(m as usize))
                    .unwrap_or(1),
            ),
        ];
        // An f16 input is its own shape class (half the bytes per element); f32 keys are unchanged.
        if x.dtype() == DType::F16 {
            fields.push(("f16", 1));
        }
        let key =
            TuneKey::new("reduce", &fields).source(kernel_source("reduce").unwrap_or_default());
        let (cands, default) = self.reduce_candidates(v);
        let eligible = |a: &ReduceAlgo| match a {
            ReduceAlgo::Col(..) => v.i > 1,
            ReduceAlgo::ColBlk(cols, _) => {
                v.i > 1 && (*cols == 8 || *cols == 32) && v.i.is_multiple_of(*cols)
            }
            ReduceAlgo::Stream(_) => v.i > 1 && v.i.is_multiple_of(8),
            _ => v.i == 1,
        };
        let chosen = match algo.filter(eligible) {
            Some(a) => {
                if once_per_key(&format!("reduce|{}|{a:?}", key.shape_key())) {
                    record_forced(device, &key, &a);
                }
                a
            }
            None if v.r <= 1 => cands[default],
            None => autotune::tune(device, &key, &cands, default, |c| {
                events_ms(&self.run_pass(device, p, *c)?)
            })?,
        };
        self.run_pass(device, p, chosen)?;
        Ok(())
    }

    fn arg_reduce(&self, max: bool, v: Ori, x: &Tensor, out: &Tensor) -> Result<()> {
        let name = if max {
            abi::ARGMAX_COL
        } else {
            abi::ARGMIN_COL
        };
        let k = self.kernel(
            abi::FAMILY,
            &half_defines(Defines::new(), &[("IN_HALF", x)]),
            name,
        )?;
        let total = v.o * v.i;
        // argmin_col has the parameters of argmax_col.
        let args = abi::ArgmaxCol {
            O: v.o as i32,
            R: v.r as i32,
            I: v.i as i32,
            x: x.storage(),
            out: out.storage(),
        };
        self.launch_1d(&k, &args, total, Some(64))?;
        Ok(())
    }

    fn reduce_to_shape(&self, device: &Device, r: ToShape<'_>) -> Result<()> {
        let (grad, out, plan, algo) = r.parts();
        let total = out.numel();
        let wg =
            plan.r >= 256 && self.info.max_work_group_size >= 256 && algo != Some(RtsAlgo::Item);
        let key = TuneKey::new(
            "reduce_to_shape",
            &[("total", bucket(total)), ("r", bucket(plan.r))],
        )
        .source(kernel_source("reduce").unwrap_or_default());
        if !wg {
            if once_per_key(&format!(
                "rts|{}|{}|item",
                device.info().index,
                key.shape_key()
            )) {
                let why = "rule: one work-item per output when fewer than 256 elements fold into each (or the device's work-groups are smaller than 256)";
                autotune::record_choice(device, &key, &RtsAlgo::Item, Source::Only, why);
            }
            let k = self.kernel(abi::FAMILY, &Defines::new(), abi::RTS_ITEM)?;
            let (nk, kshape, kstride, nr, rshape, rstride) = rts_axes(plan);
            let args = abi::RtsItem {
                total: total as i32,
                nk,
                kshape,
                kstride,
                nr,
                rshape,
                rstride,
                R: plan.r as i32,
                grad: grad.storage(),
                out: out.storage(),
            };
            self.launch_1d(&k, &args, total, Some(64))?;
            return Ok(());
        }
        let chosen = match algo {
            Some(a) => {
                if once_per_key(&format!(
                    "rts|{}|{}|{a:?}",
                    device.info().index,
                    key.shape_key()
                )) {
                    record_forced(device, &key, &a);
                }
                a
            }
            None => {
                if let Some(a) = autotune::answered::<RtsAlgo>(device, &key) {
                    self.run_rts(device, r, a)?;
                    return Ok(());
                }
                let cands = self.rts_candidates(total, plan);
                // First choice before measurement, from the recorded winners: one work-group per output on
                // CPU OpenCL, the most flattened slices on GPUs.
                let default = if self.info.kind == "cpu" {
                    0
                } else {
                    cands.len() - 1
                };
                autotune::tune(device, &key, &cands, default, |a| {
                    events_ms(&self.run_rts(device, r, *a)?)
                })?
            }
        };
        self.run_rts(device, r, chosen)?;
        Ok(())
    }

    fn sqrt_sum(&self, parts: &Tensor, out: &Tensor) -> Result<()> {
        let k = self.kernel(abi::FAMILY, &Defines::new(), abi::SQRT_SUM)?;
        let args = abi::SqrtSum {
            n: parts.numel() as i32,
            x: parts.storage(),
            out: out.storage(),
        };
        self.run(&k, &args, &[1], Some(&[1]))?;
        Ok(())
    }
}
