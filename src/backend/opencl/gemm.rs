//! OpenCL GEMM: the kernel candidates of `kernels/gemm.cl`, their launch geometry, and measured selection.

#![allow(clippy::too_many_arguments)]

use serde::Serialize;

use crate::Device;
use crate::autotune::{self, TuneKey, bucket};
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::Event;
use crate::backend::opencl::abi::gemm as abi;
use crate::backend::opencl::events_ms;
use crate::backend::opencl::gemm_tc::{self, TcTile};
use crate::backend::opencl::program::{Defines, ProgramSpec, QuickKey, kernel_source, quick_key};
use crate::contract::gemm::{BiasMode, Gemm, GemmKernels, GemmOp, GemmTune};
use crate::device::DeviceType;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// The epilogue's bias code in the kernels' arguments.
fn bias_code(b: BiasMode) -> i32 {
    match b {
        BiasMode::None => 0,
        BiasMode::Row => 1,
    }
}

/// The autotune key `g` is measured under; its candidates run `kernels/gemm.cl` (and `kernels/gemm_tc.cl`
/// when `tc`: the precision then names the kernel, see [`gemm_tc::tuned_name`]).
pub(super) fn tune_key(g: &Gemm, tc: bool) -> TuneKey {
    let key = match &g.tune {
        GemmTune::Matmul => TuneKey::new(
            gemm_tc::tuned_name(g, tc, "matmul"),
            &[
                ("m", bucket(g.m)),
                ("n", bucket(g.n)),
                ("k", bucket(g.k)),
                ("batch", bucket(g.batch)),
                ("trans_a", g.trans_a as i64),
                ("trans_b", g.trans_b as i64),
            ],
        ),
        GemmTune::Named(name, key) => {
            TuneKey::from_shape_key(gemm_tc::tuned_name(g, tc, name), key.as_str())
        }
    };
    let key = key.source(kernel_source("gemm").unwrap_or_default());
    if tc {
        key.source(kernel_source("gemm_tc").unwrap_or_default())
    } else {
        key
    }
}

/// One kernel shape of the family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algo {
    /// Double-buffered local-memory tiles `tm×tn×tk`, `rm×rn` outputs per work-item, float4 global access
    /// where the operands are 16-byte aligned (GPUs). `flat` folds the batches into the columns when A is
    /// shared by every batch (see [`ClDevice::flat_ok`]). `ks` > 1 slices each K tile among `ks` layers of
    /// work-items, whose sums are added in local memory (products with few outputs per batch).
    Tiled {
        tm: usize,
        tn: usize,
        tk: usize,
        rm: usize,
        rn: usize,
        ks: usize,
        flat: bool,
    },
    /// Packed panels, `mr` rows × `vw·nb` columns per work-item, `ly` work-items per group along rows (CPU).
    Packed {
        mr: usize,
        vw: usize,
        nb: usize,
        ly: usize,
    },
    /// As `Packed`, reading A and B in place (no packing pass).
    Reg {
        mr: usize,
        vw: usize,
        nb: usize,
        ly: usize,
    },
    /// K ≤ 64 without transposes: `px` columns of B per work-item in registers, rows of A broadcast from local
    /// memory, `ls` work-items per group.
    SmallK { px: usize, ls: usize },
    /// `gemm_simple`: one program for every product, quick to build; never a tuning candidate. A GPU runs it
    /// for a product whose chosen kernel is still being built by a helper process (see [`ClDevice::gemm_choice`]).
    Simple,
    /// Tensor cores (TF32 or FP16 `mma.sync`), see `gemm_tc.rs`.
    Tc(TcTile),
}

/// The quick kernel's candidate (no K split).
pub(crate) const SIMPLE: GemmCand = GemmCand {
    algo: Algo::Simple,
    splits: 1,
};

/// A candidate: a kernel shape and the number of K splits (1 = no split).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemmCand {
    pub algo: Algo,
    pub splits: usize,
}

impl Serialize for GemmCand {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let v = match self.algo {
            Algo::Tiled {
                tm,
                tn,
                tk,
                rm,
                rn,
                ks,
                flat,
            } => match (flat, ks) {
                (false, 1) => serde_json::json!(["tiled", tm, tn, tk, rm, rn, self.splits]),
                (true, 1) => serde_json::json!(["tiled_flat", tm, tn, tk, rm, rn, self.splits]),
                (false, _) => {
                    serde_json::json!(["tiled_sliced", tm, tn, tk, rm, rn, ks, self.splits])
                }
                (true, _) => {
                    serde_json::json!(["tiled_flat_sliced", tm, tn, tk, rm, rn, ks, self.splits])
                }
            },
            Algo::Packed { mr, vw, nb, ly } => {
                serde_json::json!(["packed", mr, vw * nb, ly, self.splits])
            }
            Algo::Reg { mr, vw, nb, ly } => {
                serde_json::json!(["reg", mr, vw * nb, ly, self.splits])
            }
            Algo::SmallK { px, ls } => serde_json::json!(["smallk", px, ls, self.splits]),
            Algo::Simple => serde_json::json!(["simple"]),
            Algo::Tc(t) => t.label_value(),
        };
        v.serialize(s)
    }
}

/// Tile configurations of the local-memory kernel, largest first: (tm, tn, tk, rm, rn, pad). `pad` floats
/// end every local row (bank spreading for the scalar stores of quads along k); the one tile whose padded
/// buffers would overflow 48 KiB of local memory has none and spreads its stores over the banks by rows instead
/// (see `kernels/gemm.cl`). Each entry won at least one shape class on the H200
/// (`bench/results/h200-2026-12-03-gemm-tiles-*`).
const TILED: [(usize, usize, usize, usize, usize, usize); 9] = [
    (256, 128, 8, 16, 8, 4),
    (128, 256, 16, 8, 16, 0),
    (128, 128, 16, 8, 8, 4),
    (128, 64, 16, 8, 4, 4),
    (64, 64, 16, 8, 4, 4),
    // Few columns or few rows (pointwise grad_w and grad_x with few input channels, small products).
    (64, 32, 16, 4, 4, 4),
    (32, 64, 16, 4, 4, 4),
    // Both operands read along K (grad_w products): longer contiguous runs per row and K tile.
    (64, 32, 32, 4, 4, 4),
    (128, 32, 32, 8, 4, 4),
];
/// Tile configurations offered with their K tiles sliced among `ks` layers of work-items: (tm, tn, tk, rm, rn,
/// ks). Small tiles only: they are the ones that leave a GPU short of work-items when M is short.
const SLICED: [(usize, usize, usize, usize, usize, usize); 3] = [
    (64, 64, 16, 8, 4, 2),
    (64, 32, 32, 4, 4, 2),
    (64, 32, 32, 4, 4, 4),
];
/// Register blocks of the CPU kernels: (rows, vector width, vectors per row).
const BLOCKS: [(usize, usize, usize); 3] = [(16, 16, 1), (12, 16, 2), (6, 8, 2)];

/// The padding (floats) of the local rows of a tiled configuration: its `TILED` entry's, else 4 (the sliced
/// configurations are small tiles).
fn tiled_pad(tm: usize, tn: usize, tk: usize) -> usize {
    TILED
        .iter()
        .find(|c| (c.0, c.1, c.2) == (tm, tn, tk))
        .map_or(4, |c| c.5)
}

/// The K split of `g` under candidate `cand`: (number of splits, K elements per split, a multiple of 16).
#[inline]
fn split_plan(g: &Gemm, cand: GemmCand) -> (usize, usize) {
    let kd = g.k.max(1);
    let l = kd.div_ceil(cand.splits.clamp(1, kd)).div_ceil(16) * 16;
    (kd.div_ceil(l), l)
}

/// For the tiled kernel writing the output at `c` = (offset, row stride, batch stride): whether every row
/// and batch start of A, B and the output lies on a multiple of 4 elements (float4 global access), and
/// whether the batches fold into the columns (`flat` asked for, aligned, unsplit and [`ClDevice::flat_ok`]).
#[inline]
fn tiled_access(g: &Gemm, c: (usize, usize, usize), splits: usize, flat: bool) -> (bool, bool) {
    let (off_c, ldc, s_c) = c;
    let aligned = [
        g.lda, g.off_a, g.s_a, g.ldb, g.off_b, g.s_b, ldc, off_c, s_c,
    ]
    .iter()
    .all(|v| v % 4 == 0);
    (
        aligned,
        flat && aligned && splits == 1 && ClDevice::flat_ok(g),
    )
}

/// The defines of the tiled kernel with tile `t` = (TM, TN, TK, RM, RN, KS) on top of `base`.
fn tiled_defines(base: Defines, t: [usize; 6], aligned: bool, flat: bool) -> Defines {
    let [tm, tn, tk, rm, rn, ks] = t;
    base.set("TM", tm)
        .set("TN", tn)
        .set("TK", tk)
        .set("RM", rm)
        .set("RN", rn)
        .set("KS", ks)
        .set("PAD", tiled_pad(tm, tn, tk))
        .set("VEC", aligned as i32)
        .set("FLAT", flat as i32)
}

/// The program memo's key of the tiled kernel with tile `t` = (TM, TN, TK, RM, RN, KS) for `g`.
fn tiled_key(g: &Gemm, t: [usize; 6], aligned: bool, flat: bool) -> QuickKey {
    let [tm, tn, tk, rm, rn, ks] = t;
    let parts = [
        g.trans_a as usize,
        g.trans_b as usize,
        tm,
        tn,
        tk,
        rm,
        rn,
        ks,
        aligned as usize,
        flat as usize,
    ];
    quick_key(abi::FAMILY, abi::GEMM_TILED, &parts)
}

/// The defines of the register-blocked kernels (packed and in place) on top of `base`.
fn blocked_defines(base: Defines, mr: usize, vw: usize, nb: usize) -> Defines {
    base.set("MR", mr).set("VW", vw).set("NB", nb)
}

impl ClDevice {
    /// The candidates for `g`. They depend only on what `g`'s tune key holds (bucketed sizes and flags), so a
    /// cached winner always names one of them.
    pub(crate) fn gemm_candidates(&self, g: &Gemm) -> Vec<GemmCand> {
        if g.math.f16_io {
            return self.tc_candidates(g);
        }
        let max_wg = self.info.max_work_group_size.max(1);
        let lmem = self.info.local_mem_bytes as usize;
        let wis = &self.info.max_work_item_sizes;
        let (bm, bn, bk) = (
            g.m.next_power_of_two(),
            g.n.next_power_of_two(),
            g.k.next_power_of_two(),
        );
        // Batches folded into the columns (a shared A and an untransposed B: pointwise convolutions), where the
        // columns of one batch leave the last column tile partly empty. The key holds the batch bucket and the
        // transposes, so this depends on the key only; a shape the folding does not fit runs unfolded.
        let folds: &[bool] = if Self::foldable(g) {
            &[false, true]
        } else {
            &[false]
        };
        let mut v = Vec::with_capacity(64);
        // Slicing K pays only where every layer still gets several rows of a K tile to multiply per tile, and
        // there are several K tiles.
        let sliced = SLICED
            .iter()
            .copied()
            .filter(|&(_, _, tk, _, _, ks)| bk >= 4 * tk && tk / ks >= 4);
        let tiles = TILED
            .iter()
            .map(|&(tm, tn, tk, rm, rn, _)| (tm, tn, tk, rm, rn, 1))
            .chain(sliced);
        for (tm, tn, tk, rm, rn, ks) in tiles {
            let (wx, wy) = (tn / rn, tm / rm);
            // The tile buffers, which the sliced reduction (tm × tn floats) reuses.
            let pad = tiled_pad(tm, tn, tk);
            let bytes =
                (2 * tk * (tm + tn + 2 * pad) * 4).max(if ks > 1 { tm * tn * 4 } else { 0 });
            let fits_items = wis.len() < 2
                || (wx <= wis[0]
                    && wy <= wis[1]
                    && (ks == 1 || wis.get(2).is_some_and(|&z| ks <= z)));
            // A tile far larger than the product only pads work. Where local memory is kept in global memory (CPU
            // OpenCL), no tile is on chip and a work-item's registers are few: blocks of more than 32 outputs per
            // work-item never win there, and each takes seconds to build (on PoCL with a cold kernel cache, the
            // first 1024³ product took 24.5 s with them and 5.5 s without).
            let useful = tm <= bm.max(32) * 2
                && tn <= bn.max(32) * 2
                && (self.info.local_mem_dedicated || rm * rn <= 32);
            if wx * wy * ks <= max_wg && bytes <= lmem && fits_items && useful {
                v.extend(folds.iter().map(|&flat| GemmCand {
                    algo: Algo::Tiled {
                        tm,
                        tn,
                        tk,
                        rm,
                        rn,
                        ks,
                        flat,
                    },
                    splits: 1,
                }));
            }
        }
        for (mr, vw, nb) in BLOCKS {
            v.push(GemmCand {
                algo: Algo::Packed { mr, vw, nb, ly: 4 },
                splits: 1,
            });
        }
        // Without a packing pass: pays for small products, where packing costs as much as the product.
        if !g.trans_b {
            v.push(GemmCand {
                algo: Algo::Reg {
                    mr: 8,
                    vw: 16,
                    nb: 2,
                    ly: 4,
                },
                splits: 1,
            });
        }
        // Short reductions: the K values of a column fit in registers. `bk` bounds g.k from above (the key
        // holds a bucket of K or K itself), so the list depends on the key only.
        if !g.trans_a && !g.trans_b && bk <= 64 && 64 * bk * 4 <= lmem {
            for (px, ls) in [(1, 128), (2, 128), (4, 64)] {
                if px * bk <= 128 && ls <= max_wg && (wis.is_empty() || ls <= wis[0]) {
                    v.push(GemmCand {
                        algo: Algo::SmallK { px, ls },
                        splits: 1,
                    });
                }
            }
        }
        // Split-K pays when the reduction is long and the output too small to fill the device.
        if bk >= 4 * bm.max(bn) && bk >= 1024 {
            // A few splits already fill a GPU (measured on the H200: 2–4 splits of 3136 per sample match 8–16).
            let splits = (bk / (4 * bm.max(bn))).clamp(2, 16);
            let base: Vec<GemmCand> = v
                .iter()
                .filter(|c| match c.algo {
                    Algo::Tiled {
                        tm, tn, flat, ks, ..
                    } => !flat && ks == 1 && (tm <= 64 || tn <= 32),
                    Algo::Packed { mr, .. } => mr == 16,
                    _ => false,
                })
                .copied()
                .collect();
            v.extend(base.into_iter().map(|c| GemmCand { splits, ..c }));
        }
        v.extend(self.tc_candidates(g));
        v
    }

    /// The candidates the tuner measures for `g`: all of [`Self::gemm_candidates`] but the kernels shaped for the
    /// other kind of memory, each of which would cost a build and a measurement. Where local memory is not on
    /// chip (CPU OpenCL) the tiled GPU kernels are left out: on PoCL they ran 4.8 to 23 times slower than the
    /// best packed or register kernel on every product tried (64×128×16 to 1024³, every transpose). Where it is
    /// on chip (GPUs) the packed and register CPU kernels are left out: on the H200 they ran at least 8.4 times
    /// slower than the best tiled kernel on all 37 GEMM keys of two rounds of bench cases. Each side's kernels
    /// stay when nothing else would be left, and every candidate stays forcible by label.
    fn tuning_candidates(&self, g: &Gemm) -> Vec<GemmCand> {
        let all = self.gemm_candidates(g);
        let tiled = |c: &GemmCand| matches!(c.algo, Algo::Tiled { .. });
        let cpu_shaped = |c: &GemmCand| matches!(c.algo, Algo::Packed { .. } | Algo::Reg { .. });
        let keep: Vec<GemmCand> = if self.info.local_mem_dedicated {
            all.iter().copied().filter(|c| !cpu_shaped(c)).collect()
        } else {
            all.iter().copied().filter(|c| !tiled(c)).collect()
        };
        if keep.is_empty() { all } else { keep }
    }

    /// Whether folded candidates are offered for `g`: several batches, A shared by all, B untransposed.
    fn foldable(g: &Gemm) -> bool {
        g.batch > 1 && g.s_a == 0 && !g.trans_b
    }

    /// Whether `g` can fold its batches into the columns: A shared by every batch, B untransposed, the columns
    /// of a batch a multiple of 4 (no float4 quad straddles two batches), and the folded column count within
    /// the kernels' 32-bit indices.
    fn flat_ok(g: &Gemm) -> bool {
        Self::foldable(g)
            && g.n.is_multiple_of(4)
            && g.n
                .checked_mul(g.batch)
                .is_some_and(|c| c <= i32::MAX as usize)
    }

    /// The programs (family, defines) candidate `cand` launches for `g`: the defines [`ClDevice::gemm_with`]
    /// builds, so that they can be built ahead of timing (`tests/program_cache_prebuild.rs` checks that timing
    /// then builds nothing more).
    pub(crate) fn gemm_programs(g: &Gemm, cand: GemmCand) -> Vec<ProgramSpec> {
        let base = Defines::new()
            .set("TRANS_A", g.trans_a as i32)
            .set("TRANS_B", g.trans_b as i32);
        let (splits, _) = split_plan(g, cand);
        let mut v: Vec<ProgramSpec> = Vec::with_capacity(4);
        let defines = match cand.algo {
            Algo::Tiled {
                tm,
                tn,
                tk,
                rm,
                rn,
                ks,
                flat,
            } => {
                let c = if splits > 1 {
                    (0, g.n, g.m * g.n)
                } else {
                    (g.off_c, g.ldc, g.s_c)
                };
                let (aligned, flat) = tiled_access(g, c, splits, flat);
                tiled_defines(base, [tm, tn, tk, rm, rn, ks], aligned, flat)
            }
            Algo::SmallK { px, ls } => base.set("SK", g.k.max(1)).set("PX", px).set("LS", ls),
            Algo::Packed { mr, vw, nb, .. } | Algo::Reg { mr, vw, nb, .. } => {
                blocked_defines(base, mr, vw, nb)
            }
            Algo::Simple => Defines::new(),
            Algo::Tc(t) => return gemm_tc::programs(g, &t),
        };
        let kernels: &[&'static str] = match cand.algo {
            Algo::Tiled { .. } => &[abi::GEMM_TILED],
            Algo::SmallK { .. } => &[abi::GEMM_SMALLK],
            Algo::Packed { .. } => &[abi::GEMM_PACK_A, abi::GEMM_PACK_B, abi::GEMM_PACKED],
            Algo::Reg { .. } => &[abi::GEMM_REG],
            Algo::Simple => &[abi::GEMM_SIMPLE],
            Algo::Tc(_) => &[],
        };
        for k in kernels {
            v.push((abi::FAMILY, k, defines.clone()));
        }
        if splits > 1 {
            v.push((abi::FAMILY, abi::GEMM_REDUCE_SPLITS, Defines::new()));
        }
        v
    }

    /// Runs `g` with candidate `c`; returns the events of every launch, in order.
    pub(crate) fn gemm_with(
        &self,
        device: &Device,
        op: &GemmOp<'_>,
        cand: GemmCand,
    ) -> Result<Vec<Event>> {
        let (a, b, c, bias, g) = op.parts();
        let kd = g.k.max(1);
        let (splits, l) = split_plan(g, cand);
        let partial = if splits > 1 {
            Some(Tensor::empty(
                device,
                &[g.batch * splits, g.m, g.n],
                DType::F32,
            )?)
        } else {
            None
        };
        let (out, off_c, ldc, s_c) = match &partial {
            Some(p) => (p, 0, g.n, g.m * g.n),
            None => (c, g.off_c, g.ldc, g.s_c),
        };
        let bias_t = bias.unwrap_or(out);
        let bias_code = if bias.is_some() { bias_code(g.bias) } else { 0 };
        let i = |v: usize| v as i32;
        let base = || {
            Defines::new()
                .set("TRANS_A", g.trans_a as i32)
                .set("TRANS_B", g.trans_b as i32)
        };
        let z = g.batch * splits;
        let mut evs = Vec::new();
        // The arguments of the kernels that read A and B in place (gemm_smallk and gemm_reg share this
        // parameter list; gemm_tiled adds the columns of one batch): the operands, then the output, the split
        // and the epilogue, which every product kernel ends with.
        let args = abi::GemmSmallk {
            M: i(g.m),
            N: i(g.n),
            K: i(g.k),
            A: a.storage(),
            offA: i(g.off_a),
            lda: i(g.lda),
            sA: i(g.s_a),
            B: b.storage(),
            offB: i(g.off_b),
            ldb: i(g.ldb),
            sB: i(g.s_b),
            C: out.storage(),
            offC: i(off_c),
            ldc: i(ldc),
            sC: i(s_c),
            S: i(splits),
            L: i(l),
            bias: bias_t.storage(),
            bias_mode: bias_code,
            relu: g.relu as i32,
        };
        match cand.algo {
            Algo::Tiled {
                tm,
                tn,
                tk,
                rm,
                rn,
                ks,
                flat,
            } => {
                let (aligned, flat) = tiled_access(g, (off_c, ldc, s_c), splits, flat);
                let key = tiled_key(g, [tm, tn, tk, rm, rn, ks], aligned, flat);
                let k = self.kernel_by(key, || {
                    tiled_defines(base(), [tm, tn, tk, rm, rn, ks], aligned, flat)
                })?;
                let (wx, wy) = (tn / rn, tm / rm);
                let (cols, zz) = if flat { (g.n * g.batch, 1) } else { (g.n, z) };
                let tiled = abi::GemmTiled {
                    M: args.M,
                    N: if flat { i(cols) } else { args.N },
                    K: args.K,
                    A: args.A,
                    offA: args.offA,
                    lda: args.lda,
                    sA: args.sA,
                    B: args.B,
                    offB: args.offB,
                    ldb: args.ldb,
                    sB: args.sB,
                    C: args.C,
                    offC: args.offC,
                    ldc: args.ldc,
                    sC: args.sC,
                    S: args.S,
                    L: args.L,
                    bias: args.bias,
                    bias_mode: args.bias_mode,
                    relu: args.relu,
                    CB: i(g.n),
                };
                let global = [cols.div_ceil(tn) * wx, g.m.div_ceil(tm) * wy, zz * ks];
                evs.push(self.run(&k, &tiled, &global, Some(&[wx, wy, ks]))?);
            }
            Algo::Simple => {
                if splits > 1 {
                    return Err(Error::Invalid(
                        "gemm_simple does not split K; its candidate has one split".into(),
                    ));
                }
                let k =
                    self.kernel_by(quick_key(abi::FAMILY, abi::GEMM_SIMPLE, &[]), Defines::new)?;
                let simple = abi::GemmSimple {
                    M: args.M,
                    N: args.N,
                    K: args.K,
                    A: args.A,
                    offA: args.offA,
                    lda: args.lda,
                    sA: args.sA,
                    ta: g.trans_a as i32,
                    B: args.B,
                    offB: args.offB,
                    ldb: args.ldb,
                    sB: args.sB,
                    tb: g.trans_b as i32,
                    C: args.C,
                    offC: args.offC,
                    ldc: args.ldc,
                    sC: args.sC,
                    bias: args.bias,
                    bias_mode: args.bias_mode,
                    relu: args.relu,
                };
                let global = [g.n.div_ceil(64) * 16, g.m.div_ceil(64) * 16, g.batch];
                evs.push(self.run(&k, &simple, &global, Some(&[16, 16, 1]))?);
            }
            Algo::SmallK { px, ls } => {
                let d = base().set("SK", g.k.max(1)).set("PX", px).set("LS", ls);
                let k = self.kernel(abi::FAMILY, &d, abi::GEMM_SMALLK)?;
                let global = [g.n.div_ceil(ls * px) * ls, z];
                evs.push(self.run(&k, &args, &global, Some(&[ls, 1]))?);
            }
            Algo::Packed { mr, vw, nb, ly } => {
                let nr = vw * nb;
                let blocked = [g.trans_a as usize, g.trans_b as usize, mr, vw, nb];
                let kernel = |name| {
                    self.kernel_by(quick_key(abi::FAMILY, name, &blocked), || {
                        blocked_defines(base(), mr, vw, nb)
                    })
                };
                let (pm, pn) = (g.m.div_ceil(mr), g.n.div_ceil(nr));
                // A shared by every batch (s_a = 0) is packed once.
                let ba = if g.s_a == 0 { 1 } else { g.batch };
                let bb = if g.s_b == 0 { 1 } else { g.batch };
                let ap = Tensor::empty(device, &[ba * pm * kd * mr], DType::F32)?;
                let bp = Tensor::empty(device, &[bb * pn * kd * nr], DType::F32)?;
                let ka = kernel(abi::GEMM_PACK_A)?;
                let pack_a = abi::GemmPackA {
                    M: args.M,
                    K: args.K,
                    A: args.A,
                    offA: args.offA,
                    lda: args.lda,
                    sA: args.sA,
                    Ap: ap.storage(),
                };
                // On a CPU a fixed work-group keeps PoCL to one compiled work-group function per kernel (it
                // compiles one per local size, and picks the local size from the shape when none is given);
                // the kernels skip the items past the panels.
                let pack_local: Option<&[usize]> =
                    (self.info.kind == DeviceType::Cpu).then_some(&[1, 4, 1]);
                evs.push(self.run(&ka, &pack_a, &[g.k.div_ceil(32), pm, ba], pack_local)?);
                let kb = kernel(abi::GEMM_PACK_B)?;
                let pack_b = abi::GemmPackB {
                    N: args.N,
                    K: args.K,
                    B: args.B,
                    offB: args.offB,
                    ldb: args.ldb,
                    sB: args.sB,
                    Bp: bp.storage(),
                };
                evs.push(self.run(&kb, &pack_b, &[g.k.div_ceil(32), pn, bb], pack_local)?);
                let s_ap = if ba == 1 { 0 } else { pm * kd * mr };
                let s_bp = if bb == 1 { 0 } else { pn * kd * nr };
                let k = kernel(abi::GEMM_PACKED)?;
                let packed = abi::GemmPacked {
                    M: args.M,
                    N: args.N,
                    K: args.K,
                    Ap: ap.storage(),
                    sAp: i(s_ap),
                    Bp: bp.storage(),
                    sBp: i(s_bp),
                    C: args.C,
                    offC: args.offC,
                    ldc: args.ldc,
                    sC: args.sC,
                    S: args.S,
                    L: args.L,
                    bias: args.bias,
                    bias_mode: args.bias_mode,
                    relu: args.relu,
                };
                evs.push(self.run(&k, &packed, &[pn, pm, z], Some(&[1, ly, 1]))?);
            }
            Algo::Reg { mr, vw, nb, ly } => {
                if g.trans_b {
                    return Err(Error::Invalid(
                        "gemm_reg reads B in place and needs an untransposed B".into(),
                    ));
                }
                let nr = vw * nb;
                let blocked = [g.trans_a as usize, g.trans_b as usize, mr, vw, nb];
                let (pm, pn) = (g.m.div_ceil(mr), g.n.div_ceil(nr));
                let k = self.kernel_by(quick_key(abi::FAMILY, abi::GEMM_REG, &blocked), || {
                    blocked_defines(base(), mr, vw, nb)
                })?;
                evs.push(self.run(&k, &args, &[pn, pm, z], Some(&[1, ly, 1]))?);
            }
            Algo::Tc(t) => evs.extend(self.gemm_tc_with(op, t)?),
        }
        if let Some(p) = &partial {
            let k = self.kernel(abi::FAMILY, &Defines::new(), abi::GEMM_REDUCE_SPLITS)?;
            let bias_t = bias.unwrap_or(c);
            let args = abi::GemmReduceSplits {
                M: i(g.m),
                N: i(g.n),
                S: i(splits),
                P: p.storage(),
                C: c.storage(),
                offC: i(g.off_c),
                ldc: i(g.ldc),
                sC: i(g.s_c),
                bias: bias_t.storage(),
                bias_mode: bias_code,
                relu: g.relu as i32,
            };
            evs.push(self.run(&k, &args, &[g.n, g.m, g.batch], None)?);
        }
        Ok(evs)
    }

    /// The measured (or cached) best candidate for `g`, under its tune key ([`tune_key`]).
    ///
    /// Where programs are built by helper processes ([`ClDevice::builds_elsewhere`]: GPUs in background mode),
    /// a choice whose programs are not at hand yet is handed to a helper and the quick kernel (`gemm_simple`)
    /// runs meanwhile; the candidates are measured only once helpers have built them all, so no call of this
    /// process waits for a compiler.
    pub(crate) fn gemm_choice(&self, device: &Device, op: &GemmOp<'_>) -> Result<GemmCand> {
        let g = op.g;
        // A repeated question is answered before the candidate list is built (most of a call's host time).
        let tc = self.tc_active(device, g)?;
        let key = tune_key(g, tc);
        let elsewhere = self.builds_elsewhere();
        if let Some(c) = autotune::answered(device, &key) {
            let c = self.tc_runnable(device, &key, g, c);
            return Ok(if elsewhere {
                self.gemm_at_hand(device, &key, g, c)
            } else {
                c
            });
        }
        let cands = self.tuning_candidates(g);
        // Default without measurement: the first tiled config on GPUs' typical limits, which every device runs;
        // the first tensor-core tile when the precision asks for tensor cores.
        let default = cands
            .iter()
            .position(|c| matches!(c.algo, Algo::Packed { .. }))
            .filter(|_| self.info.kind == "cpu")
            .unwrap_or(0);
        let default = match tc {
            true => cands
                .iter()
                .position(|c| matches!(c.algo, Algo::Tc(_)))
                .unwrap_or(default),
            false => default,
        };
        let all = || -> Vec<ProgramSpec> {
            cands
                .iter()
                .flat_map(|c| Self::gemm_programs(g, *c))
                .collect()
        };
        let ready = !elsewhere || {
            let specs = all();
            let ready = self.programs_ready(&specs);
            if !ready {
                self.build_elsewhere(&specs, false);
            }
            ready
        };
        let mut prebuild = self.prebuild_once(all);
        let c = autotune::tune_gated(device, &key, &cands, default, ready, |cand| {
            prebuild();
            events_ms(&self.gemm_with(device, op, *cand)?)
        })?;
        let c = self.tc_runnable(device, &key, g, c);
        Ok(if elsewhere {
            self.gemm_at_hand(device, &key, g, c)
        } else {
            c
        })
    }

    /// `c` when its programs are at hand (or a helper failed on them: they are then built here, and a build
    /// error surfaces at the launch); else `c`'s programs go to the front of the helpers' queue and the quick
    /// kernel runs.
    fn gemm_at_hand(&self, device: &Device, key: &TuneKey, g: &Gemm, c: GemmCand) -> GemmCand {
        // The quick kernel reads f32 only: an f16 product on tensor cores builds its own program here.
        if g.math.f16_io {
            return c;
        }
        // The hot case, without building the program list: a tiled kernel this process has launched before.
        if let Algo::Tiled {
            tm,
            tn,
            tk,
            rm,
            rn,
            ks,
            flat,
        } = c.algo
        {
            let (splits, _) = split_plan(g, c);
            let out = if splits > 1 {
                (0, g.n, g.m * g.n)
            } else {
                (g.off_c, g.ldc, g.s_c)
            };
            let (aligned, flat) = tiled_access(g, out, splits, flat);
            if self.has_kernel(&tiled_key(g, [tm, tn, tk, rm, rn, ks], aligned, flat)) {
                return c;
            }
        }
        let specs = Self::gemm_programs(g, c);
        if self.programs_ready(&specs) || self.failed_elsewhere(&specs) {
            return c;
        }
        self.build_elsewhere(&specs, true);
        autotune::record_interim(device, key, &c, &SIMPLE);
        SIMPLE
    }

    /// Chooses the candidates of several products that one op runs together and gets every program they and
    /// `extra` launch ready at once, built on several threads (or loaded from the binary cache), instead of one
    /// after another at each first launch; returns the choices in the order of `ops`. An empty product gets
    /// `None` and runs nothing. A program that fails to build is reported by its launch.
    pub(crate) fn gemm_plan(
        &self,
        device: &Device,
        ops: &[&GemmOp<'_>],
        extra: &[ProgramSpec],
    ) -> Result<Vec<Option<GemmCand>>> {
        let mut choices = Vec::with_capacity(ops.len());
        let mut programs: Vec<ProgramSpec> = extra.to_vec();
        for op in ops {
            let (a, b, c, bias, g) = op.parts();
            g.check(a, b, c, bias)?;
            if g.m == 0 || g.n == 0 || g.batch == 0 {
                choices.push(None);
                continue;
            }
            let cand = self.gemm_choice(device, op)?;
            programs.extend(Self::gemm_programs(g, cand));
            choices.push(Some(cand));
        }
        if let Err(e) = self.prebuild(&programs) {
            tracing::debug!("prebuilding an op's programs: {e}");
        }
        Ok(choices)
    }

    /// Runs a product with the choice [`ClDevice::gemm_plan`] made for it (none: an empty product).
    pub(crate) fn gemm_planned(
        &self,
        device: &Device,
        op: &GemmOp<'_>,
        cand: Option<GemmCand>,
    ) -> Result<Vec<Event>> {
        match cand {
            Some(c) => self.gemm_with(device, op, c),
            None => Ok(Vec::new()),
        }
    }

    /// Chooses and runs the product; returns the launch events.
    pub(crate) fn gemm_events(&self, device: &Device, op: &GemmOp<'_>) -> Result<Vec<Event>> {
        let cand = self.gemm_choice(device, op)?;
        self.gemm_with(device, op, cand)
    }
}

impl GemmKernels for ClDevice {
    fn gemm(&self, device: &Device, op: &GemmOp<'_>) -> Result<()> {
        self.gemm_events(device, op).map(|_| ())
    }

    fn gemm_labels(&self, g: &Gemm) -> Vec<String> {
        self.gemm_candidates(g)
            .iter()
            .map(|c| autotune::label(&serde_json::to_value(c).unwrap_or_default()))
            .collect()
    }

    fn gemm_forced(&self, device: &Device, op: &GemmOp<'_>, label: &str) -> Result<()> {
        let g = op.g;
        let cands = self.gemm_candidates(g);
        let labels = self.gemm_labels(g);
        // The quick kernel is no tuning candidate, but runs any product on request.
        let simple = autotune::label(&serde_json::to_value(SIMPLE).unwrap_or_default());
        if label == simple {
            return self.gemm_with(device, op, SIMPLE).map(|_| ());
        }
        let Some(i) = labels.iter().position(|l| l == label) else {
            return Err(Error::Invalid(format!(
                "gemm candidate `{label}` is not one of {labels:?} (or the quick kernel {simple})"
            )));
        };
        self.gemm_with(device, op, cands[i]).map(|_| ())
    }

    fn gemm_tensor_cores(&self, p: crate::contract::precision::Precision) -> bool {
        self.tc_capable(p)
    }
}
