//! OpenCL training batch_norm2d and the one-launch row kernels of layer_norm and rms_norm: kernels chosen by
//! measurement per shape bucket.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use crate::autotune::{self, TuneKey, bucket};
use crate::backend::opencl::abi::norm as abi;
use crate::backend::opencl::abi::rownorm as rn_abi;
use crate::backend::opencl::elementwise::{half_bits, half_defines};
use crate::backend::opencl::program::{Defines, kernel_source, quick_key};
use crate::backend::opencl::{ClDevice, Event, events_ms};
use crate::contract::NormKernels;
use crate::contract::norm::{
    BatchNormAlgo, BnApply, BnBack, BnStats, BnTrain, MAX_HELD, MAX_ROW_HELD, RowNorm, RowNormAlgo,
    RowNormBack,
};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// The units of a channel's N·P elements that the batch_norm2d kernels walk: float4s when H·W is a multiple
/// of 4 (the kernels' `VEC4`), floats otherwise.
fn bn_units(n: usize, p: usize) -> usize {
    if p.is_multiple_of(4) {
        n * p / 4
    } else {
        n * p
    }
}

/// A tag no earlier one-launch batch_norm2d launch used (never 0, the value of zeroed memory): its partials
/// carry it, so a waiting work-group tells this launch's partials from what a reused buffer still holds.
fn launch_tag() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    loop {
        let t = NEXT.fetch_add(1, Ordering::Relaxed);
        if t != 0 {
            return t;
        }
    }
}

/// How often a waiting group of the one-launch kernels reads a partial before it sums its channel itself:
/// `NETCL_BN_POLLS` (0 to 2^24; 0 makes every group that would wait do so), read once, by default 2^15.
fn bn_polls() -> u32 {
    static POLLS: OnceLock<u32> = OnceLock::new();
    *POLLS.get_or_init(|| {
        std::env::var("NETCL_BN_POLLS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .filter(|&n| n <= 1 << 24)
            .unwrap_or(1 << 15)
    })
}

impl ClDevice {
    fn bn_candidates(&self, v: [usize; 3]) -> (Vec<BatchNormAlgo>, usize) {
        let [n, c, p] = [v[0], v[1], v[2]];
        let cu = self.info.compute_units.max(1) as usize;
        let max_wg = self.info.max_work_group_size.max(1);
        let per_channel = n * p;
        let mut out = Vec::new();
        // The work-group statistics (Wg, Wide) are GPU layouts: where local memory is not on chip (CPU OpenCL)
        // they ran 10 times slower than one item per chunk or worse, and stay forcible there.
        let on_chip = self.info.local_mem_dedicated;
        for local in [256usize, 512] {
            if local > max_wg || !on_chip {
                continue;
            }
            // About four work-groups per compute unit, each reading at least 8 elements per item.
            let g = (cu * 4)
                .div_ceil(c)
                .clamp(1, (per_channel / (local * 8)).max(1));
            for g in [g, (g * 4).min((per_channel / (local * 8)).max(1))] {
                let a = BatchNormAlgo {
                    stats: BnStats::Wg(local, g),
                    apply: BnApply::Flat,
                };
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
        // Four loads in flight per item, at most four work-groups of 256 per compute unit so that they all run
        // at once, each item reading at least 16 elements; then the apply that walks the same chunks backwards.
        if max_wg >= 256 && on_chip {
            let g = (cu * 4 / c).clamp(1, (per_channel / (256 * 16)).max(1));
            out.push(BatchNormAlgo {
                stats: BnStats::Wide(256, g),
                apply: BnApply::Back,
            });
            // One launch, offered on GPUs: its work-groups wait for work-groups that started before them, and
            // OpenCL promises no progress between work-groups; GPUs run resident groups side by side, CPU
            // runtimes need not (there every wait runs to its bound). Chunks of 16K to 64K elements: smaller keeps the
            // channels in flight cached between their statistics and their normalisation, larger has fewer
            // groups waiting (8K chunks lost on the H200 at both bench shapes).
            let pipe = if self.info.kind == "gpu" {
                &[256 * 64, 256 * 128, 256 * 256][..]
            } else {
                &[]
            };
            // Chunks held in registers (GPUs), offered while a channel's groups fit on the device at once
            // with two groups of 256 per compute unit; otherwise every group would wait its full bound.
            let units = bn_units(n, p);
            let hold = if self.info.kind == "gpu" {
                &[(256usize, 4usize), (256, 8), (256, 16), (512, 8)][..]
            } else {
                &[]
            };
            for &(l, u) in hold {
                if l <= max_wg && units.div_ceil(l * u) <= 2 * cu * 256 / l {
                    out.push(BatchNormAlgo {
                        stats: BnStats::Held(l, u),
                        apply: BnApply::Hold,
                    });
                }
            }
            for &per in pipe {
                let a = BatchNormAlgo {
                    stats: BnStats::Wide(256, (per_channel / per).max(1)),
                    apply: BnApply::Pipe,
                };
                if !out.contains(&a) {
                    out.push(a);
                }
            }
        }
        let g = (cu * 2).div_ceil(c).clamp(1, n.max(1));
        for apply in [BnApply::Plane, BnApply::Flat] {
            out.push(BatchNormAlgo {
                stats: BnStats::Item(g),
                apply,
            });
        }
        let default = if self.info.kind == "cpu" {
            out.iter()
                .position(|a| matches!(a.stats, BnStats::Item(_)))
                .unwrap_or(0)
        } else {
            0
        };
        (out, default)
    }

    fn run_bn(
        &self,
        device: &Device,
        bn: &BnTrain<'_>,
        algo: BatchNormAlgo,
    ) -> Result<Vec<crate::backend::opencl::Event>> {
        let s = bn.x.shape();
        let (n, c, p) = (s[0], s[1], s[2] * s[3]);
        let vec4 = p.is_multiple_of(4);
        let d = Defines::new().set("VEC4", u8::from(vec4));
        let mut evs = Vec::with_capacity(3);
        let units = bn_units(n, p);
        let g = match algo.stats {
            BnStats::Wg(_, g) | BnStats::Wide(_, g) | BnStats::Item(g) => g.max(1),
            BnStats::Held(l, u) => units.div_ceil(l * u).max(1),
        };
        // The one-launch kernels publish each partial as two 64-bit words (value and launch tag).
        let one_launch = matches!(algo.apply, BnApply::Pipe | BnApply::Hold);
        let part = Tensor::empty(
            device,
            &[c * g * if one_launch { 4 } else { 2 }],
            DType::F32,
        )?;
        // An absent γ or β is never read; any buffer stands in for the argument.
        let (gamma, beta) = (
            bn.gamma.unwrap_or(bn.rm).storage(),
            bn.beta.unwrap_or(bn.rm).storage(),
        );
        let (has_gamma, has_beta) = (i32::from(bn.gamma.is_some()), i32::from(bn.beta.is_some()));
        let (n32, c32, p32, g32) = (n as i32, c as i32, p as i32, g as i32);
        let rc = units.div_ceil(g).max(1) as i32;
        // The statistics pass's chunks with the finish and the apply folded in (bn_apply_back, bn_pipe and
        // bn_hold share these leading parameters).
        let chunked = || abi::BnApplyBack {
            N: n32,
            C: c32,
            P: p32,
            rc,
            G: g32,
            eps: bn.eps,
            momentum: bn.momentum,
            has_gamma,
            has_beta,
            x: bn.x.storage(),
            part: part.storage(),
            gamma,
            beta,
            rm: bn.rm.storage(),
            rv: bn.rv.storage(),
            mean_out: bn.mean.storage(),
            rstd_out: bn.rstd.storage(),
            stat: bn.stat.storage(),
            rm_out: bn.rm_out.storage(),
            rv_out: bn.rv_out.storage(),
            y: bn.y.storage(),
        };
        // The one-launch kernels: `hold` on C·g groups of chunks held in registers (at most local·u units each),
        // `pipe` on (C + 1)·g groups; both take the counters, local room for g partials and a new launch tag.
        let one = match (algo.apply, algo.stats) {
            (BnApply::Hold, BnStats::Held(local, u)) => {
                Some((local, d.clone().set("HOLD", u), abi::BN_HOLD, c))
            }
            (BnApply::Pipe, BnStats::Wide(local, _)) => {
                Some((local, d.clone().set("UNR", 4), abi::BN_PIPE, c + 1))
            }
            (BnApply::Pipe, _) => {
                return Err(Error::Invalid(
                    "batch_norm2d: the one-launch apply needs the wide statistics".into(),
                ));
            }
            _ => None,
        };
        if let Some((local, defines, name, groups)) = one {
            let local = local.min(self.info.max_work_group_size.max(1));
            let counters = self.counters(c + 2)?;
            let Some((sync, _)) = counters.as_ref() else {
                return Err(Error::Invalid("batch_norm2d: no counter buffer".into()));
            };
            let lds = local.max(g) * 4;
            let a = chunked();
            // bn_hold has the parameters of bn_pipe.
            let args = abi::BnPipe {
                N: n32,
                C: c32,
                P: p32,
                rc,
                G: g32,
                eps: a.eps,
                momentum: a.momentum,
                has_gamma,
                has_beta,
                x: a.x,
                part: a.part,
                gamma,
                beta,
                rm: a.rm,
                rv: a.rv,
                mean_out: a.mean_out,
                rstd_out: a.rstd_out,
                stat: a.stat,
                rm_out: a.rm_out,
                rv_out: a.rv_out,
                y: a.y,
                sync,
                ls: lds,
                lq: lds,
                tag: launch_tag(),
            };
            let k = self.kernel(abi::FAMILY, &defines.set("POLLS", bn_polls()), name)?;
            evs.push(self.run(&k, &args, &[local * g * groups], Some(&[local]))?);
            return Ok(evs);
        }
        match algo.stats {
            BnStats::Wg(local, _) | BnStats::Wide(local, _) => {
                let local = local.min(self.info.max_work_group_size.max(1));
                let unr = if matches!(algo.stats, BnStats::Wide(..)) {
                    4
                } else {
                    1
                };
                let k = self.kernel(abi::FAMILY, &d.clone().set("UNR", unr), abi::BN_PARTIAL_WG)?;
                let args = abi::BnPartialWg {
                    N: n32,
                    C: c32,
                    P: p32,
                    rc,
                    G: g32,
                    x: bn.x.storage(),
                    part: part.storage(),
                    ls: local * 4,
                    lq: local * 4,
                };
                evs.push(self.run(&k, &args, &[local * g, c], Some(&[local, 1]))?);
            }
            BnStats::Item(_) => {
                let rc = (n * p).div_ceil(g).max(1);
                let k = self.kernel(abi::FAMILY, &Defines::new(), abi::BN_PARTIAL_ITEM)?;
                let args = abi::BnPartialItem {
                    N: n32,
                    C: c32,
                    P: p32,
                    rc: rc as i32,
                    G: g32,
                    x: bn.x.storage(),
                    part: part.storage(),
                };
                evs.push(self.run(&k, &args, &[g, c], None)?);
            }
            BnStats::Held(..) => {
                return Err(Error::Invalid(
                    "batch_norm2d: the held statistics go with the hold apply only".into(),
                ));
            }
        }
        if algo.apply == BnApply::Back {
            // The statistics pass's grid and chunks, the partials folded in: no finishing launch.
            let local = match algo.stats {
                BnStats::Wg(l, _) | BnStats::Wide(l, _) | BnStats::Held(l, _) => l,
                BnStats::Item(_) => 256,
            };
            let local = local.min(self.info.max_work_group_size.max(1));
            let k = self.kernel(abi::FAMILY, &d.clone().set("UNR", 4), abi::BN_APPLY_BACK)?;
            evs.push(self.run(&k, &chunked(), &[local * g, c], Some(&[local, 1]))?);
            return Ok(evs);
        }
        let k = self.kernel(abi::FAMILY, &Defines::new(), abi::BN_FINISH)?;
        let a = chunked();
        let args = abi::BnFinish {
            N: n32,
            C: c32,
            P: p32,
            G: g32,
            eps: a.eps,
            momentum: a.momentum,
            has_gamma,
            has_beta,
            x: a.x,
            part: a.part,
            gamma,
            beta,
            rm: a.rm,
            rv: a.rv,
            mean_out: a.mean_out,
            rstd_out: a.rstd_out,
            stat: a.stat,
            rm_out: a.rm_out,
            rv_out: a.rv_out,
        };
        evs.push(self.launch_1d(&k, &args, c, Some(64))?);
        match algo.apply {
            BnApply::Flat => {
                let total = if vec4 { n * c * p / 4 } else { n * c * p };
                let k = self.kernel(abi::FAMILY, &d, abi::BN_APPLY_FLAT)?;
                let local = 256.min(self.info.max_work_group_size.max(1));
                let args = abi::BnApplyFlat {
                    total: total as i32,
                    C: c32,
                    P: p32,
                    x: bn.x.storage(),
                    mean: bn.mean.storage(),
                    stat: bn.stat.storage(),
                    y: bn.y.storage(),
                };
                evs.push(self.run(&k, &args, &[total], Some(&[local]))?);
            }
            BnApply::Plane => {
                let k = self.kernel(abi::FAMILY, &Defines::new(), abi::BN_APPLY_PLANE)?;
                let args = abi::BnApplyPlane {
                    planes: (n * c) as i32,
                    C: c32,
                    P: p32,
                    x: bn.x.storage(),
                    mean: bn.mean.storage(),
                    stat: bn.stat.storage(),
                    y: bn.y.storage(),
                };
                evs.push(self.run(&k, &args, &[n * c], None)?);
            }
            // Launched above, with the finish folded in.
            BnApply::Back | BnApply::Pipe | BnApply::Hold => {}
        }
        Ok(evs)
    }
}

impl ClDevice {
    /// The row-normalisation candidates for rows of `d` and the index of the unmeasured default: on GPUs the
    /// composed path (the first choice before the one-launch kernels were measured there), on CPU OpenCL one
    /// work-item per row. `reg`: offer the register form (the backward has none); `half_rows`: the rows are
    /// f16, so the raw-halves register form is offered too where D is a multiple of 8.
    fn rn_candidates(&self, d: usize, reg: bool, half_rows: bool) -> (Vec<RowNormAlgo>, usize) {
        let max_wg = self.info.max_work_group_size.max(1);
        let gpu = self.info.kind != "cpu";
        let mut out = vec![RowNormAlgo::Composed, RowNormAlgo::Item];
        if gpu && reg {
            // Rows in registers: at most MAX_ROW_HELD values per item, no more items than the row has values
            // (64 always offered).
            for l in [64usize, 128, 256, 512, 1024] {
                let k = d.div_ceil(l);
                if l <= max_wg && k <= MAX_ROW_HELD && (l == 64 || l <= d) {
                    out.push(RowNormAlgo::Reg(l, k));
                }
            }
            // f16 rows held as halves, eight a load: up to twice the values per item, so half the items.
            if half_rows && d.is_multiple_of(8) {
                for l in [64usize, 128, 256, 512, 1024] {
                    let k = d.div_ceil(l).next_multiple_of(8);
                    if l <= max_wg && k <= 2 * MAX_ROW_HELD && (l == 64 || 8 * l <= d) {
                        out.push(RowNormAlgo::Reg8(l, k));
                    }
                }
            }
        }
        let wg: &[usize] = if gpu { &[64, 128, 256] } else { &[64] };
        out.extend(
            wg.iter()
                .copied()
                .filter(|&l| l <= max_wg)
                .map(RowNormAlgo::Wg),
        );
        let default = if gpu { 0 } else { 1 };
        (out, default)
    }

    /// Launches one one-launch row kernel (not `Composed`).
    fn run_rn(&self, rn: &RowNorm<'_>, algo: RowNormAlgo) -> Result<Event> {
        let d = rn.d;
        // The kernel is found by a compact key (centring, the f16 bits, the variant); its defines are written
        // only when its program must be built.
        let halves = half_bits(&[rn.x, rn.y]);
        let (ha, hb) = (
            rn.gamma.map_or(0, |g| half_bits(&[g])),
            rn.beta.map_or(0, |b| half_bits(&[b])),
        );
        let defs = || {
            let mut defs = half_defines(
                Defines::new().set("CENTER", u8::from(rn.center)),
                &[("IN_HALF", rn.x), ("OUT_HALF", rn.y)],
            );
            if let Some(g) = rn.gamma {
                defs = half_defines(defs, &[("A_HALF", g)]);
            }
            if let Some(b) = rn.beta {
                defs = half_defines(defs, &[("B_HALF", b)]);
            }
            defs
        };
        let key = |name, extra: usize| {
            quick_key(
                rn_abi::FAMILY,
                name,
                &[usize::from(rn.center), halves, ha, hb, extra],
            )
        };
        // An absent γ or β is never read; x stands in for the argument.
        let gamma = rn.gamma.unwrap_or(rn.x).storage();
        let beta = rn.beta.unwrap_or(rn.x).storage();
        let (has_gamma, has_beta) = (i32::from(rn.gamma.is_some()), i32::from(rn.beta.is_some()));
        // A register count that does not cover this row (an answer kept for another row length) runs as the
        // work-group kernel of the same size.
        let algo = match algo {
            RowNormAlgo::Reg(l, k) if d > k * l || k == 0 => RowNormAlgo::Wg(l),
            RowNormAlgo::Reg8(l, k)
                if d > k * l || k == 0 || !d.is_multiple_of(8) || rn.x.dtype() != DType::F16 =>
            {
                RowNormAlgo::Wg(l)
            }
            a => a,
        };
        let half = rn.x.dtype() == DType::F16;
        match algo {
            RowNormAlgo::Wg(l) | RowNormAlgo::Reg(l, _) | RowNormAlgo::Reg8(l, _) => {
                let l = l.min(self.info.max_work_group_size.max(1));
                let k = match algo {
                    // Rows of a multiple of four elements move four at a time.
                    // The key's variant: K values per item, the form (single, four, eight halves) and
                    // whether the folds shuffle. They do for f16 rows only: on an H100 the shuffled folds
                    // made layer_norm over 8192 rows of 16384 9 % faster in f16 and 7 % slower in f32 (the
                    // same register kernel, `bench/results/README.md`).
                    RowNormAlgo::Reg(_, k) => {
                        let v4 = d.is_multiple_of(4);
                        let sh = half && self.fold_shuffles(l);
                        let kv = k * 8 + usize::from(sh) * 4 + usize::from(v4);
                        self.kernel_by(key(rn_abi::RN_ROW_REG, kv), || {
                            let d = defs().set("RN_K", k).set("RN_V4", u8::from(v4));
                            if sh { self.fold_defines(d, l) } else { d }
                        })?
                    }
                    RowNormAlgo::Reg8(_, k) => {
                        let sh = half && self.fold_shuffles(l);
                        let kv = k * 8 + usize::from(sh) * 4 + 2;
                        self.kernel_by(key(rn_abi::RN_ROW_REG, kv), || {
                            let d = defs().set("RN_K", k).set("RN_V8", 1);
                            if sh { self.fold_defines(d, l) } else { d }
                        })?
                    }
                    _ => self.kernel_by(key(rn_abi::RN_ROW_WG, 0), defs)?,
                };
                // rn_row_reg has the parameters of rn_row_wg; the register kernel's folds
                // (GROUP_FOLD) use 32 floats beyond one per work-item.
                let args = rn_abi::RnRowWg {
                    D: d as i32,
                    eps: rn.eps,
                    has_gamma,
                    has_beta,
                    x: rn.x.storage(),
                    gamma,
                    beta,
                    y: rn.y.storage(),
                    mean: rn.mean.storage(),
                    rstd: rn.rstd.storage(),
                    sc: (l + 32) * 4,
                };
                self.run(&k, &args, &[l * rn.rows], Some(&[l]))
            }
            RowNormAlgo::Item => {
                let vec8 = d.is_multiple_of(8);
                let k = self.kernel_by(key(rn_abi::RN_ROW_ITEM, usize::from(vec8)), || {
                    defs().set("VEC8", u8::from(vec8))
                })?;
                let args = rn_abi::RnRowItem {
                    rows: rn.rows as i32,
                    D: d as i32,
                    eps: rn.eps,
                    has_gamma,
                    has_beta,
                    x: rn.x.storage(),
                    gamma,
                    beta,
                    y: rn.y.storage(),
                    mean: rn.mean.storage(),
                    rstd: rn.rstd.storage(),
                };
                self.run(&k, &args, &[rn.rows], None)
            }
            RowNormAlgo::Composed => Err(Error::Invalid(
                "row_norm: the composed path is run by the op, not launched here".into(),
            )),
        }
    }
}

impl ClDevice {
    /// Launches one one-launch backward kernel (not `Composed`; `Reg(local, _)` runs as `Wg(local)`): the rows
    /// are centred (layer_norm) when `rb.mean` is given.
    fn run_rnb(&self, rb: &RowNormBack<'_>, algo: RowNormAlgo) -> Result<Event> {
        let d = rb.d;
        let center = rb.mean.is_some();
        let halves = half_bits(&[rb.x, rb.g, rb.dx]);
        let ha = rb.gamma.map_or(0, |g| half_bits(&[g]));
        let defs = || {
            let defs = half_defines(
                Defines::new().set("CENTER", u8::from(center)),
                &[("IN_HALF", rb.x), ("B_HALF", rb.g), ("OUT_HALF", rb.dx)],
            );
            match rb.gamma {
                Some(gm) => half_defines(defs, &[("A_HALF", gm)]),
                None => defs,
            }
        };
        let key = |name, extra: usize| {
            quick_key(
                rn_abi::FAMILY,
                name,
                &[usize::from(center), halves, ha, extra],
            )
        };
        // An absent γ is never read (x stands in), nor is the mean of rms_norm (rstd stands in).
        let gamma = rb.gamma.unwrap_or(rb.x).storage();
        let mean = rb.mean.unwrap_or(rb.rstd).storage();
        let has_gamma = i32::from(rb.gamma.is_some());
        match algo {
            RowNormAlgo::Wg(l) | RowNormAlgo::Reg(l, _) | RowNormAlgo::Reg8(l, _) => {
                let l = l.min(self.info.max_work_group_size.max(1));
                let k = self.kernel_by(key(rn_abi::RNB_ROW_WG, 0), defs)?;
                let args = rn_abi::RnbRowWg {
                    D: d as i32,
                    has_gamma,
                    x: rb.x.storage(),
                    g: rb.g.storage(),
                    gamma,
                    mean,
                    rstd: rb.rstd.storage(),
                    dx: rb.dx.storage(),
                    sc: l * 4,
                };
                self.run(&k, &args, &[l * rb.rows], Some(&[l]))
            }
            RowNormAlgo::Item => {
                let vec8 = d.is_multiple_of(8);
                let k = self.kernel_by(key(rn_abi::RNB_ROW_ITEM, usize::from(vec8)), || {
                    defs().set("VEC8", u8::from(vec8))
                })?;
                let args = rn_abi::RnbRowItem {
                    rows: rb.rows as i32,
                    D: d as i32,
                    has_gamma,
                    x: rb.x.storage(),
                    g: rb.g.storage(),
                    gamma,
                    mean,
                    rstd: rb.rstd.storage(),
                    dx: rb.dx.storage(),
                };
                self.run(&k, &args, &[rb.rows], None)
            }
            RowNormAlgo::Composed => Err(Error::Invalid(format!(
                "{}: the composed path is run by the op, not launched here",
                back_op(center)
            ))),
        }
    }

    /// The backward's input gradient over rows for layer_norm (`center`, with `rb.mean`) or rms_norm: the
    /// forced or tuned algorithm, under the tune key `{op}_rows_backward`; `Ok(false)` when the composed path
    /// is the choice.
    fn rows_backward(
        &self,
        device: &Device,
        rb: &RowNormBack<'_>,
        center: bool,
        composed: &mut dyn FnMut() -> Result<()>,
    ) -> Result<bool> {
        let op = back_op(center);
        if rb.mean.is_some() != center {
            return Err(Error::Invalid(format!(
                "{op}: the saved mean is {} for this normalisation",
                if center { "needed" } else { "not used" }
            )));
        }
        if rb.rows == 0 || rb.d == 0 {
            return Ok(false);
        }
        let max_wg = self.info.max_work_group_size.max(1);
        let halves = half_bits(&[rb.x, rb.g, rb.dx]);
        let kernel = if center {
            "layer_norm_rows_backward"
        } else {
            "rms_norm_rows_backward"
        };
        let key = row_key(kernel, rb.rows, rb.d, halves);
        let misfit = |a: RowNormAlgo| match a {
            RowNormAlgo::Wg(l) | RowNormAlgo::Reg(l, _) | RowNormAlgo::Reg8(l, _)
                if !(l.is_power_of_two() && l <= max_wg) =>
            {
                Some(format!(
                    "{op}: algorithm {a:?} does not fit rows of {} on this device (work-groups need a power-of-two size up to {max_wg})",
                    rb.d
                ))
            }
            _ => None,
        };
        let chosen = row_choice(
            device,
            &key,
            rb.algo,
            misfit,
            || self.rn_candidates(rb.d, false, false),
            composed,
            |a| self.run_rnb(rb, a).map(drop),
        )?;
        if chosen == RowNormAlgo::Composed {
            return Ok(false);
        }
        self.run_rnb(rb, chosen)?;
        Ok(true)
    }
}

/// The tune key of a training batch_norm2d kernel family `kernel` for (N, C, H·W) `v`: N, C and H·W bucketed,
/// whether H·W is a multiple of 4 (float4 planes), then `extra`.
pub(super) fn bn_key(
    kernel: &'static str,
    v: [usize; 3],
    extra: &[(&'static str, i64)],
) -> TuneKey {
    let mut fields = vec![
        ("n", bucket(v[0])),
        ("c", bucket(v[1])),
        ("hw", bucket(v[2])),
        ("hw4", i64::from(v[2].is_multiple_of(4))),
    ];
    fields.extend_from_slice(extra);
    TuneKey::new(kernel, &fields).source(kernel_source("norm").unwrap_or_default())
}

/// A batch_norm2d algorithm for `key`: a forced one, refused with the reason `misfit` gives or recorded as the
/// decision; else the kept answer; else the tuner's choice among `cands()`, each timed by `time`.
pub(super) fn bn_choice<A: serde::Serialize + Clone + 'static>(
    device: &Device,
    key: &TuneKey,
    forced: Option<A>,
    misfit: impl Fn(&A) -> Option<String>,
    cands: impl FnOnce() -> (Vec<A>, usize),
    time: impl FnMut(&A) -> Result<f64>,
) -> Result<A> {
    if let Some(a) = forced {
        if let Some(why) = misfit(&a) {
            return Err(Error::Invalid(why));
        }
        super::reduce::record_forced(device, key, &a);
        return Ok(a);
    }
    if let Some(a) = autotune::answered(device, key) {
        return Ok(a);
    }
    let (cands, default) = cands();
    autotune::tune(device, key, &cands, default, time)
}

/// The backward op's name in messages.
fn back_op(center: bool) -> &'static str {
    if center {
        "layer_norm_backward"
    } else {
        "rms_norm_backward"
    }
}

/// Times one candidate on the host clock from an idle queue to an idle queue: the composed path is several
/// launches (and the host work between them) that no single event spans, so every candidate is timed alike.
fn host_ms(device: &Device, run: impl FnOnce() -> Result<()>) -> Result<f64> {
    device.synchronize()?;
    let t = Instant::now();
    run()?;
    device.synchronize()?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// The tune key of a row-norm kernel: rows and D bucketed, whether D is a multiple of 8 (float8 loads) and
/// which buffers are f16.
fn row_key(kernel: &'static str, rows: usize, d: usize, halves: usize) -> TuneKey {
    TuneKey::new(
        kernel,
        &[
            ("rows", bucket(rows)),
            ("d", bucket(d)),
            ("d8", i64::from(d.is_multiple_of(8))),
            ("f16", halves as i64),
        ],
    )
    .source(kernel_source("rownorm").unwrap_or_default())
}

/// The row-norm algorithm for `key`: a forced one, refused with the reason `misfit` gives or recorded as the
/// decision; else the kept answer to a repeated question (before the candidate list is built), or the tuner's
/// choice among `cands()`, where the composed path is one candidate and every candidate is timed on the host
/// clock ([`host_ms`]).
fn row_choice(
    device: &Device,
    key: &TuneKey,
    forced: Option<RowNormAlgo>,
    misfit: impl Fn(RowNormAlgo) -> Option<String>,
    cands: impl FnOnce() -> (Vec<RowNormAlgo>, usize),
    composed: &mut dyn FnMut() -> Result<()>,
    mut run: impl FnMut(RowNormAlgo) -> Result<()>,
) -> Result<RowNormAlgo> {
    if forced.is_none()
        && let Some(a) = autotune::answered(device, key)
    {
        return Ok(a);
    }
    let (cands, default) = cands();
    match forced {
        Some(a) => {
            if let Some(why) = misfit(a) {
                return Err(Error::Invalid(why));
            }
            super::reduce::record_forced(device, key, &a);
            Ok(a)
        }
        None => autotune::tune(device, key, &cands, default, |a| {
            host_ms(device, || match *a {
                RowNormAlgo::Composed => composed(),
                a => run(a),
            })
        }),
    }
}

impl NormKernels for ClDevice {
    fn batch_norm_backward(&self, device: &Device, bb: &BnBack<'_>) -> Result<bool> {
        self.batch_norm_backward_kernels(device, bb)
    }

    fn rms_norm_backward_rows(
        &self,
        device: &Device,
        rb: &RowNormBack<'_>,
        composed: &mut dyn FnMut() -> Result<()>,
    ) -> Result<bool> {
        self.rows_backward(device, rb, false, composed)
    }

    fn layer_norm_backward_rows(
        &self,
        device: &Device,
        rb: &RowNormBack<'_>,
        composed: &mut dyn FnMut() -> Result<()>,
    ) -> Result<bool> {
        self.rows_backward(device, rb, true, composed)
    }

    fn row_norm(
        &self,
        device: &Device,
        rn: &RowNorm<'_>,
        composed: &mut dyn FnMut() -> Result<()>,
    ) -> Result<bool> {
        if rn.rows == 0 || rn.d == 0 {
            return Ok(false);
        }
        let max_wg = self.info.max_work_group_size.max(1);
        let halves = half_bits(&[rn.x, rn.y]);
        let kernel = if rn.center {
            "layer_norm_rows"
        } else {
            "rms_norm_rows"
        };
        let key = row_key(kernel, rn.rows, rn.d, halves);
        let misfit = |a: RowNormAlgo| {
            let ok = match a {
                RowNormAlgo::Composed | RowNormAlgo::Item => true,
                RowNormAlgo::Wg(l) => l.is_power_of_two() && l <= max_wg,
                RowNormAlgo::Reg(l, k) => {
                    l.is_power_of_two()
                        && l <= max_wg
                        && (1..=MAX_ROW_HELD).contains(&k)
                        && rn.d <= k * l
                }
                RowNormAlgo::Reg8(l, k) => {
                    l.is_power_of_two()
                        && l <= max_wg
                        && (1..=2 * MAX_ROW_HELD).contains(&k)
                        && rn.d <= k * l
                        && rn.d.is_multiple_of(8)
                        && rn.x.dtype() == DType::F16
                }
            };
            (!ok).then(|| format!(
                "row_norm: algorithm {a:?} does not fit rows of {} on this device (work-groups need a power-of-two size up to {max_wg}; reg holds 1 to {MAX_ROW_HELD} values per item and needs D ≤ k·local; reg8 holds up to twice as many, of an f16 input with D a multiple of 8)",
                rn.d
            ))
        };
        let chosen = row_choice(
            device,
            &key,
            rn.algo,
            misfit,
            || self.rn_candidates(rn.d, true, rn.x.dtype() == DType::F16),
            composed,
            |a| self.run_rn(rn, a).map(drop),
        )?;
        if chosen == RowNormAlgo::Composed {
            return Ok(false);
        }
        self.run_rn(rn, chosen)?;
        Ok(true)
    }

    fn batch_norm_train(&self, device: &Device, bn: &BnTrain<'_>) -> Result<()> {
        let s = bn.x.shape();
        let v = [s[0], s[1], s[2] * s[3]];
        let key = bn_key("batch_norm2d", v, &[]);
        let max_wg = self.info.max_work_group_size.max(1);
        let misfit = |a: &BatchNormAlgo| {
            let ok = match a.stats {
                BnStats::Wg(l, g) | BnStats::Wide(l, g) => {
                    l.is_power_of_two() && l <= max_wg && g >= 1
                }
                BnStats::Item(g) => g >= 1,
                BnStats::Held(l, u) => {
                    l.is_power_of_two() && l <= max_wg && (1..=MAX_HELD).contains(&u)
                }
            } && (a.apply != BnApply::Pipe || matches!(a.stats, BnStats::Wide(..)))
                && (a.apply == BnApply::Hold) == matches!(a.stats, BnStats::Held(..));
            (!ok).then(|| format!(
                "batch_norm2d: algorithm {a:?} is not valid here (work-groups need a power-of-two size up to {max_wg}, at least one chunk per channel; the one-launch pipe apply needs the wide statistics; the hold apply and the held statistics, 1 to {MAX_HELD} units per item, go together)"
            ))
        };
        let chosen = bn_choice(
            device,
            &key,
            bn.algo,
            misfit,
            || self.bn_candidates(v),
            |a| events_ms(&self.run_bn(device, bn, *a)?),
        )?;
        self.run_bn(device, bn, chosen)?;
        Ok(())
    }
}
