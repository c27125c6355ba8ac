//! OpenCL convolution: the direct, im2col + GEMM and pointwise algorithms, forward and backward, and the
//! measured choice between them and Winograd (`winograd.rs`).

#![allow(clippy::too_many_arguments)]

use crate::backend::opencl::Event;
use serde::Serialize;

use crate::Device;
use crate::autotune::{self, Source, TuneKey, bucket, shape_key};
use crate::backend::opencl::ClDevice;
use crate::backend::opencl::abi::conv as abi;
use crate::backend::opencl::events_ms;
use crate::backend::opencl::program::{Defines, kernel_source};
use crate::contract::conv::{ConvAlgo, ConvBwd, ConvFwd, ConvGeom, ConvKernels};
use crate::contract::gemm::{BiasMode, Gemm, GemmOp, GemmTune};
use crate::contract::precision::{Math, Precision};
use crate::device::DeviceType;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// The most bytes an im2col workspace may take; larger batches are processed in chunks.
const COL_BUDGET: usize = 128 << 20;

/// `NETCL_CONV_POINTWISE`: `auto` (measured), `1` (always the pointwise kernels), `0` (never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PointwiseMode {
    Auto,
    Force,
    Off,
}

fn pointwise_mode() -> PointwiseMode {
    match std::env::var("NETCL_CONV_POINTWISE")
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        Ok("1" | "on" | "true" | "yes" | "force") => PointwiseMode::Force,
        Ok("0" | "off" | "false" | "no") => PointwiseMode::Off,
        _ => PointwiseMode::Auto,
    }
}

/// netcl's two-way pointwise choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum PwChoice {
    Legacy,
    Pointwise,
}

/// The two int8 geometry vectors of `kernels/conv.cl`.
fn cl_args(g: &ConvGeom) -> ([i32; 8], [i32; 8]) {
    let a = [g.n, g.c, g.h, g.w, g.f, g.oh, g.ow, g.groups].map(|v| v as i32);
    let b = [g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw].map(|v| v as i32);
    (a, b)
}

/// The batch, channel and spatial fields of a convolution's tune key (N, H and W bucketed).
pub(super) fn nchw_key(n: usize, c: usize, h: usize, w: usize) -> [(&'static str, i64); 4] {
    [
        ("n", bucket(n)),
        ("c", c as i64),
        ("h", bucket(h)),
        ("w", bucket(w)),
    ]
}

/// The geometry key of `kernel`, one of the general algorithm choices; their candidates run the conv, GEMM
/// and Winograd kernels.
pub(super) fn algo_key(
    kernel: &'static str,
    g: &ConvGeom,
    extra: &[(&'static str, i64)],
) -> TuneKey {
    let mut k = Vec::with_capacity(14 + extra.len());
    k.extend(nchw_key(g.n, g.c, g.h, g.w));
    k.extend([
        ("f", g.f as i64),
        ("kh", g.kh as i64),
        ("kw", g.kw as i64),
        ("sh", g.sh as i64),
        ("sw", g.sw as i64),
        ("ph", g.ph as i64),
        ("pw", g.pw as i64),
        ("dh", g.dh as i64),
        ("dw", g.dw as i64),
        ("groups", g.groups as i64),
    ]);
    k.extend_from_slice(extra);
    push_precision(&mut k, g);
    TuneKey::new(kernel, &k)
        .source(kernel_source("conv").unwrap_or_default())
        .source(kernel_source("gemm").unwrap_or_default())
        .source(kernel_source("winograd").unwrap_or_default())
}

/// Adds the GEMMs' precision to a convolution's key when it is not FP32 (FP32 keys stay as they were, so kept
/// and shipped FP32 answers still apply).
fn push_precision(k: &mut Vec<(&'static str, i64)>, g: &ConvGeom) {
    if g.prec != Precision::Fp32 {
        k.push(("prec", g.prec as i64));
    }
}

/// netcl's pointwise shape class: (bucket N, C, bucket H·W, F, has_bias, flag).
fn pointwise_key(kernel: &'static str, g: &ConvGeom, has_bias: bool, flag: bool) -> TuneKey {
    let mut k = vec![
        ("n", bucket(g.n)),
        ("c", g.c as i64),
        ("hw", bucket(g.h * g.w)),
        ("f", g.f as i64),
        ("bias", has_bias as i64),
        ("flag", flag as i64),
    ];
    push_precision(&mut k, g);
    TuneKey::new(kernel, &k)
        .source(kernel_source("conv").unwrap_or_default())
        .source(kernel_source("gemm").unwrap_or_default())
}

/// The first choice among the general algorithms before measurement: Winograd where it is eligible for a
/// layer of some width (it won every 3×3 layer recorded, on the H200 and on PoCL), else im2col + GEMM.
fn general_default(cands: &[ConvAlgo], g: &ConvGeom) -> usize {
    cands
        .iter()
        .position(|a| *a == ConvAlgo::Winograd)
        .filter(|_| g.c >= 16 && g.f >= 16)
        .or_else(|| cands.iter().position(|a| *a == ConvAlgo::Im2col))
        .unwrap_or(0)
}

impl ClDevice {
    /// Checks and runs one product; returns its launch events (none for an empty product).
    pub(super) fn run_gemm(&self, device: &Device, op: &GemmOp<'_>) -> Result<Vec<Event>> {
        let (a, b, c, bias, g) = op.parts();
        g.check(a, b, c, bias)?;
        if g.m == 0 || g.n == 0 || g.batch == 0 {
            return Ok(Vec::new());
        }
        self.gemm_events(device, op)
    }

    /// Whether im2col and col2im run one element per work-item (GPUs: consecutive work-items touch consecutive
    /// addresses) or one col row / input row per work-item (CPUs: few work-items, each copying long spans), for
    /// a launch over `elements` work-items. Not measured: `NETCL_AUTOTUNE_FORCE=conv_col_layout=row` or
    /// `=element` overrides the device type's choice. The element kernels index in 32 bits: a chunk of 2^31
    /// elements or more runs by rows.
    fn col_by_element(&self, elements: usize) -> Result<bool> {
        if elements >= i32::MAX as usize {
            return Ok(false);
        }
        match autotune::config::config().forced_label("conv_col_layout") {
            Some("element") => Ok(true),
            Some("row") => Ok(false),
            Some(other) => Err(Error::Invalid(format!(
                "NETCL_AUTOTUNE_FORCE names `{other}` for `conv_col_layout`; its layouts are `row` and `element`"
            ))),
            None => Ok(self.info.kind != DeviceType::Cpu),
        }
    }

    /// The largest power of two no larger than `want` (a power of two) and the device's largest work-group.
    fn group_up_to(&self, want: usize) -> usize {
        let most =
            1usize << (usize::BITS - 1 - self.info.max_work_group_size.max(1).leading_zeros());
        want.min(most)
    }

    /// Samples per im2col chunk.
    fn col_chunk(&self, g: &ConvGeom) -> usize {
        let per = (g.c * g.kh * g.kw * g.p() * 4).max(1);
        let budget = COL_BUDGET.min((self.info.max_alloc_bytes as usize / 2).max(per));
        (budget / per).clamp(1, g.n.max(1))
    }

    // ------------------------------------------------------------------------------------------ forward

    fn fwd_direct(&self, op: &ConvFwd<'_>) -> Result<Vec<Event>> {
        let (x, w, bias, out, g, relu) = op.parts();
        let (g0, g1) = cl_args(g);
        let k = self.kernel(abi::FAMILY, &Defines::new(), abi::CONV_DIRECT_FWD)?;
        let args = abi::ConvDirectFwd {
            g0,
            g1,
            x: x.storage(),
            w: w.storage(),
            bias: bias.unwrap_or(w).storage(),
            has_bias: bias.is_some() as i32,
            relu: relu as i32,
            out: out.storage(),
        };
        Ok(vec![self.run(&k, &args, &[out.numel()], Some(&[64]))?])
    }

    fn im2col(
        &self,
        x: &Tensor,
        col: &Tensor,
        g: &ConvGeom,
        n0: usize,
        nb: usize,
    ) -> Result<Event> {
        let (g0, g1) = cl_args(g);
        let args = abi::ConvIm2col {
            g0,
            g1,
            n0: n0 as i32,
            nb: nb as i32,
            x: x.storage(),
            col: col.storage(),
        };
        let rows = g.c * g.kh * g.kw;
        if !self.col_by_element(nb * rows * g.p())? {
            // A CPU runs a few work-items per core well: one col row each.
            let k = self.kernel(abi::FAMILY, &Defines::new(), abi::CONV_IM2COL)?;
            self.run(&k, &args, &[rows, nb], None)
        } else {
            let k = self.kernel(abi::FAMILY, &Defines::new(), abi::CONV_IM2COL_ELEM)?;
            self.run(
                &k,
                &args,
                &[nb * rows * g.p()],
                Some(&[self.group_up_to(256)]),
            )
        }
    }

    fn fwd_im2col(&self, device: &Device, op: &ConvFwd<'_>) -> Result<Vec<Event>> {
        let (x, w, bias, out, g, relu) = op.parts();
        let (cg, fg, kk, p) = (g.c / g.groups, g.f / g.groups, g.kh * g.kw, g.p());
        let chunk = self.col_chunk(g);
        let col = Tensor::empty(device, &[chunk * g.c * kk * p], DType::F32)?;
        let fused = g.groups == 1;
        let mut ev = Vec::new();
        let mut n0 = 0;
        while n0 < g.n {
            let nb = chunk.min(g.n - n0);
            ev.push(self.im2col(x, &col, g, n0, nb)?);
            for grp in 0..g.groups {
                let gm = Gemm {
                    m: fg,
                    n: p,
                    k: cg * kk,
                    batch: nb,
                    trans_a: false,
                    trans_b: false,
                    off_a: grp * fg * cg * kk,
                    lda: cg * kk,
                    s_a: 0,
                    off_b: grp * cg * kk * p,
                    ldb: p,
                    s_b: g.c * kk * p,
                    off_c: (n0 * g.f + grp * fg) * p,
                    ldc: p,
                    s_c: g.f * p,
                    bias: if bias.is_some() && fused {
                        BiasMode::Row
                    } else {
                        BiasMode::None
                    },
                    relu: relu && fused,
                    math: Math::f32_at(g.prec),
                    tune: GemmTune::Named(
                        "conv2d_gemm",
                        shape_key(&[fg as i64, (cg * kk) as i64, bucket(p), bucket(nb), 0, 0]),
                    ),
                };
                ev.extend(self.run_gemm(
                    device,
                    &GemmOp::new(w, &col, out, if fused { bias } else { None }, &gm),
                )?);
            }
            n0 += nb;
        }
        if !fused && (bias.is_some() || relu) {
            // With groups the GEMM sees one group's rows, so the bias and ReLU run as their own pass.
            let k = self.kernel(abi::FAMILY, &Defines::new(), abi::CONV_BIAS_ACT)?;
            let args = abi::ConvBiasAct {
                F: g.f as i32,
                P: p as i32,
                total: out.numel() as i32,
                bias: bias.unwrap_or(w).storage(),
                has_bias: bias.is_some() as i32,
                relu: relu as i32,
                out: out.storage(),
            };
            ev.push(self.run(&k, &args, &[out.numel()], None)?);
        }
        Ok(ev)
    }

    fn fwd_pointwise(&self, device: &Device, op: &ConvFwd<'_>) -> Result<Vec<Event>> {
        let (x, w, bias, out, g, relu) = op.parts();
        let p = g.p();
        let gm = Gemm {
            bias: if bias.is_some() {
                BiasMode::Row
            } else {
                BiasMode::None
            },
            relu,
            tune: GemmTune::Named(
                "conv2d_pointwise_gemm",
                shape_key(&[g.f as i64, g.c as i64, bucket(p), bucket(g.n), 0]),
            ),
            math: Math::f32_at(g.prec),
            ..Gemm::dense(g.f, p, g.c, g.n, false, false, true)
        };
        let mut ev = Vec::new();
        ev.extend(self.run_gemm(device, &GemmOp::new(w, x, out, bias, &gm))?);
        Ok(ev)
    }
    fn fwd_algo(&self, device: &Device, algo: ConvAlgo, op: &ConvFwd<'_>) -> Result<Vec<Event>> {
        match algo {
            ConvAlgo::Direct => self.fwd_direct(op),
            ConvAlgo::Im2col => self.fwd_im2col(device, op),
            ConvAlgo::Winograd => self.fwd_winograd(device, op),
            ConvAlgo::Pointwise => self.fwd_pointwise(device, op),
        }
    }

    /// The general path: direct, im2col or Winograd, whichever is eligible and fastest.
    fn fwd_general(&self, device: &Device, op: &ConvFwd<'_>) -> Result<Vec<Event>> {
        let (_, _, bias, _, g, relu) = op.parts();
        let cands: Vec<ConvAlgo> = [ConvAlgo::Im2col, ConvAlgo::Winograd, ConvAlgo::Direct]
            .into_iter()
            .filter(|a| g.eligible(*a))
            .collect();
        let key = algo_key(
            "conv2d_fwd_algo",
            g,
            &[("bias", bias.is_some() as i64), ("relu", relu as i64)],
        );
        let default = general_default(&cands, g);
        let algo = autotune::tune(device, &key, &cands, default, |a| {
            events_ms(&self.fwd_algo(device, *a, op)?)
        })?;
        self.fwd_algo(device, algo, op)
    }

    // ------------------------------------------------------------------------------------------ backward

    fn bias_grad(
        &self,
        device: &Device,
        go: &Tensor,
        gb: &Tensor,
        g: &ConvGeom,
        ev: &mut Vec<Event>,
    ) -> Result<()> {
        let p = g.p();
        let cands: Vec<&str> = if self.info.max_work_group_size < 64 {
            vec!["serial"]
        } else if self.info.kind == DeviceType::Cpu {
            vec!["wg", "serial", "rows"]
        } else {
            vec!["rows", "wg", "serial"]
        };
        // f work-groups of t work-items; group j sums the n rows j, j + f, j + 2f, … of go (P long) into out[j].
        let groups = |n: usize, f: usize, out: &Tensor, t: usize| -> Result<Event> {
            let k = self.kernel(abi::FAMILY, &Defines::new(), abi::CONV_BIAS_GRAD_WG)?;
            let args = abi::ConvBiasGradWg {
                N: n as i32,
                F: f as i32,
                P: p as i32,
                go: go.storage(),
                gb: out.storage(),
                red: t * 4,
            };
            self.run(&k, &args, &[f * t], Some(&[t]))
        };
        let run = |c: &str| -> Result<Vec<Event>> {
            match c {
                // Each (sample, filter) row on its own, as many work-items as it has elements (32 to 256),
                // then the samples' partial sums added.
                "rows" => {
                    let part = Tensor::empty(device, &[g.n * g.f], DType::F32)?;
                    let t = self.group_up_to(p.next_power_of_two().clamp(32, 256));
                    let rows = groups(1, g.n * g.f, &part, t)?;
                    Ok(vec![rows, self.sum_batches(&part, gb, g.f, g.n, false)?])
                }
                "wg" => Ok(vec![groups(g.n, g.f, gb, 64)?]),
                _ => {
                    let k =
                        self.kernel(abi::FAMILY, &Defines::new(), abi::CONV_BIAS_GRAD_SERIAL)?;
                    let args = abi::ConvBiasGradSerial {
                        N: g.n as i32,
                        F: g.f as i32,
                        P: p as i32,
                        go: go.storage(),
                        gb: gb.storage(),
                    };
                    Ok(vec![self.run(&k, &args, &[g.f], None)?])
                }
            }
        };
        let key = TuneKey::new(
            "conv2d_grad_bias",
            &[("n", bucket(g.n)), ("f", g.f as i64), ("p", bucket(p))],
        )
        .source(kernel_source("conv").unwrap_or_default());
        let c = autotune::tune(device, &key, &cands, 0, |c| events_ms(&run(c)?))?;
        ev.extend(run(c)?);
        Ok(())
    }

    fn bwd_direct(&self, op: &ConvBwd<'_>, ev: &mut Vec<Event>) -> Result<()> {
        let (x, w, go, gr, g) = op.parts();
        let (g0, g1) = cl_args(g);
        let d = Defines::new();
        if let Some(gx) = gr.gx {
            let k = self.kernel(abi::FAMILY, &d, abi::CONV_DIRECT_BWD_X)?;
            let args = abi::ConvDirectBwdX {
                g0,
                g1,
                go: go.storage(),
                w: w.storage(),
                gx: gx.storage(),
            };
            ev.push(self.run(&k, &args, &[gx.numel()], Some(&[64]))?);
        }
        if let Some(gw) = gr.gw {
            let k = self.kernel(abi::FAMILY, &d, abi::CONV_DIRECT_BWD_W)?;
            let args = abi::ConvDirectBwdW {
                g0,
                g1,
                x: x.storage(),
                go: go.storage(),
                gw: gw.storage(),
            };
            ev.push(self.run(&k, &args, &[gw.numel()], Some(&[64]))?);
        }
        Ok(())
    }

    /// Sums `count` consecutive blocks of `len` floats of `part` into `out` (adding to it when `accumulate`).
    fn sum_batches(
        &self,
        part: &Tensor,
        out: &Tensor,
        len: usize,
        count: usize,
        accumulate: bool,
    ) -> Result<Event> {
        let k = self.kernel(abi::FAMILY, &Defines::new(), abi::CONV_SUM_BATCHES)?;
        let args = abi::ConvSumBatches {
            len: len as i32,
            count: count as i32,
            accumulate: accumulate as i32,
            part: part.storage(),
            out: out.storage(),
        };
        self.run(&k, &args, &[len], None)
    }
    fn bwd_im2col(&self, device: &Device, op: &ConvBwd<'_>, ev: &mut Vec<Event>) -> Result<()> {
        let (x, w, go, gr, g) = op.parts();
        let (cg, fg, kk, p) = (g.c / g.groups, g.f / g.groups, g.kh * g.kw, g.p());
        let chunk = self.col_chunk(g);
        let col = Tensor::empty(device, &[chunk * g.c * kk * p], DType::F32)?;
        let part = if gr.gw.is_some() {
            Some(Tensor::empty(device, &[chunk * g.f * cg * kk], DType::F32)?)
        } else {
            None
        };
        let (g0, g1) = cl_args(g);
        let mut n0 = 0;
        while n0 < g.n {
            let nb = chunk.min(g.n - n0);
            if let (Some(gw), Some(part)) = (gr.gw, &part) {
                ev.push(self.im2col(x, &col, g, n0, nb)?);
                for grp in 0..g.groups {
                    let gm = Gemm {
                        m: fg,
                        n: cg * kk,
                        k: p,
                        batch: nb,
                        trans_a: false,
                        trans_b: true,
                        off_a: (n0 * g.f + grp * fg) * p,
                        lda: p,
                        s_a: g.f * p,
                        off_b: grp * cg * kk * p,
                        ldb: p,
                        s_b: g.c * kk * p,
                        off_c: grp * fg * cg * kk,
                        ldc: cg * kk,
                        s_c: g.f * cg * kk,
                        bias: BiasMode::None,
                        relu: false,
                        math: Math::f32_at(g.prec),
                        tune: GemmTune::Named(
                            "conv2d_gemm",
                            shape_key(&[fg as i64, (cg * kk) as i64, bucket(p), bucket(nb), 0, 1]),
                        ),
                    };
                    ev.extend(self.run_gemm(device, &GemmOp::new(go, &col, part, None, &gm))?);
                }
                ev.push(self.sum_batches(part, gw, g.f * cg * kk, nb, n0 > 0)?);
            }
            if let Some(gx) = gr.gx {
                for grp in 0..g.groups {
                    let gm = Gemm {
                        m: cg * kk,
                        n: p,
                        k: fg,
                        batch: nb,
                        trans_a: true,
                        trans_b: false,
                        off_a: grp * fg * cg * kk,
                        lda: cg * kk,
                        s_a: 0,
                        off_b: (n0 * g.f + grp * fg) * p,
                        ldb: p,
                        s_b: g.f * p,
                        off_c: grp * cg * kk * p,
                        ldc: p,
                        s_c: g.c * kk * p,
                        bias: BiasMode::None,
                        relu: false,
                        math: Math::f32_at(g.prec),
                        tune: GemmTune::Named(
                            "conv2d_gemm",
                            shape_key(&[(cg * kk) as i64, fg as i64, bucket(p), bucket(nb), 1, 0]),
                        ),
                    };
                    ev.extend(self.run_gemm(device, &GemmOp::new(w, go, &col, None, &gm))?);
                }
                let args = abi::ConvCol2im {
                    g0,
                    g1,
                    n0: n0 as i32,
                    nb: nb as i32,
                    col: col.storage(),
                    gx: gx.storage(),
                };
                ev.push(if !self.col_by_element(nb * g.c * g.h * g.w)? {
                    let k = self.kernel(abi::FAMILY, &Defines::new(), abi::CONV_COL2IM)?;
                    self.run(&k, &args, &[nb * g.c * g.h], None)?
                } else {
                    let k = self.kernel(abi::FAMILY, &Defines::new(), abi::CONV_COL2IM_ELEM)?;
                    self.run(
                        &k,
                        &args,
                        &[nb * g.c * g.h * g.w],
                        Some(&[self.group_up_to(256)]),
                    )?
                });
            }
            n0 += nb;
        }
        Ok(())
    }
    fn bwd_pointwise(&self, device: &Device, op: &ConvBwd<'_>, ev: &mut Vec<Event>) -> Result<()> {
        let (x, w, go, gr, g) = op.parts();
        let p = g.p();
        let gx_gemm = Gemm {
            tune: GemmTune::Named(
                "conv2d_pointwise_gemm",
                shape_key(&[g.c as i64, g.f as i64, bucket(p), bucket(g.n), 1]),
            ),
            math: Math::f32_at(g.prec),
            ..Gemm::dense(g.c, p, g.f, g.n, true, false, true)
        };
        // Split-K over the samples: one partial F×C product per sample (the GEMM may split P further), then
        // one reduction.
        let gw_gemm = Gemm {
            tune: GemmTune::Named(
                "conv2d_pointwise_grad_w",
                shape_key(&[g.f as i64, g.c as i64, bucket(g.n), bucket(p)]),
            ),
            math: Math::f32_at(g.prec),
            ..Gemm::dense(g.f, g.c, p, g.n, false, true, false)
        };
        let part = match gr.gw {
            Some(_) => Some(Tensor::empty(device, &[g.n, g.f, g.c], DType::F32)?),
            None => None,
        };
        let gx_op = gr.gx.map(|gx| GemmOp::new(w, go, gx, None, &gx_gemm));
        let gw_op = part
            .as_ref()
            .map(|part| GemmOp::new(go, x, part, None, &gw_gemm));
        // Both products' programs (and the reduction's) are built together on a first call.
        let ops: Vec<&GemmOp<'_>> = gx_op.iter().chain(gw_op.iter()).collect();
        let extra = [(abi::FAMILY, abi::CONV_SUM_BATCHES, Defines::new())];
        let extra = if gw_op.is_some() { &extra[..] } else { &[] };
        let mut plan = self.gemm_plan(device, &ops, extra)?.into_iter();
        if let Some(op) = &gx_op {
            ev.extend(self.gemm_planned(device, op, plan.next().flatten())?);
        }
        if let (Some(op), Some(part), Some(gw)) = (&gw_op, &part, gr.gw) {
            ev.extend(self.gemm_planned(device, op, plan.next().flatten())?);
            ev.push(self.sum_batches(part, gw, g.f * g.c, g.n, false)?);
        }
        Ok(())
    }
    fn bwd_algo(&self, device: &Device, algo: ConvAlgo, op: &ConvBwd<'_>) -> Result<Vec<Event>> {
        let (_, _, go, gr, g) = op.parts();
        let mut ev = Vec::new();
        match algo {
            ConvAlgo::Direct => self.bwd_direct(op, &mut ev)?,
            ConvAlgo::Im2col => self.bwd_im2col(device, op, &mut ev)?,
            ConvAlgo::Winograd => ev = self.bwd_winograd(device, op)?,
            ConvAlgo::Pointwise => self.bwd_pointwise(device, op, &mut ev)?,
        }
        if let Some(gb) = gr.gb {
            self.bias_grad(device, go, gb, g, &mut ev)?;
        }
        Ok(ev)
    }

    /// netcl's two-way pointwise dispatch under `kernel`: `NETCL_CONV_POINTWISE` forces or forbids the
    /// pointwise kernels, otherwise `run` times both choices (the legacy general path and the pointwise GEMM).
    fn pointwise_select(
        &self,
        device: &Device,
        key: &TuneKey,
        run: impl Fn(PwChoice) -> Result<Vec<Event>>,
    ) -> Result<PwChoice> {
        match pointwise_mode() {
            PointwiseMode::Off => Ok(PwChoice::Legacy),
            PointwiseMode::Force => {
                autotune::record_choice(
                    device,
                    key,
                    &PwChoice::Pointwise,
                    Source::Forced,
                    "NETCL_CONV_POINTWISE=1",
                );
                Ok(PwChoice::Pointwise)
            }
            // First choice before measurement: the pointwise GEMM, which won nearly every recorded shape.
            PointwiseMode::Auto => autotune::tune(
                device,
                key,
                &[PwChoice::Legacy, PwChoice::Pointwise],
                1,
                |c| events_ms(&run(*c)?),
            ),
        }
    }

    fn bwd_general(&self, device: &Device, op: &ConvBwd<'_>) -> Result<Vec<Event>> {
        let (_, _, _, gr, g) = op.parts();
        let cands: Vec<ConvAlgo> = [ConvAlgo::Im2col, ConvAlgo::Winograd, ConvAlgo::Direct]
            .into_iter()
            .filter(|a| g.eligible(*a))
            .collect();
        let key = algo_key(
            "conv2d_bwd_algo",
            g,
            &[
                ("gx", gr.gx.is_some() as i64),
                ("gw", gr.gw.is_some() as i64),
                ("gb", gr.gb.is_some() as i64),
            ],
        );
        let default = general_default(&cands, g);
        let algo = autotune::tune(device, &key, &cands, default, |a| {
            events_ms(&self.bwd_algo(device, *a, op)?)
        })?;
        self.bwd_algo(device, algo, op)
    }
}

impl ClDevice {
    /// One pass of netcl's dispatch: a forced `algo` runs (recorded under the first of `keys`); a
    /// pointwise-eligible geometry runs the measured choice (under the second of `keys`) between the general
    /// path and the pointwise kernels; anything else takes the general path. `run(None)` is the general
    /// path, `run(Some(a))` algorithm `a`.
    fn dispatch(
        &self,
        device: &Device,
        g: &ConvGeom,
        algo: Option<ConvAlgo>,
        keys: (impl FnOnce() -> TuneKey, impl FnOnce() -> TuneKey),
        run: impl Fn(Option<ConvAlgo>) -> Result<Vec<Event>>,
    ) -> Result<()> {
        if let Some(a) = algo {
            autotune::record_choice(device, &(keys.0)(), &a, Source::Forced, "algo option");
            run(Some(a))?;
            return Ok(());
        }
        if g.eligible(ConvAlgo::Pointwise) {
            let choice = self.pointwise_select(device, &(keys.1)(), |c| match c {
                PwChoice::Legacy => run(None),
                PwChoice::Pointwise => run(Some(ConvAlgo::Pointwise)),
            })?;
            if choice == PwChoice::Pointwise {
                run(Some(ConvAlgo::Pointwise))?;
                return Ok(());
            }
        }
        run(None)?;
        Ok(())
    }
}

impl ConvKernels for ClDevice {
    fn conv2d_fwd(&self, device: &Device, op: &ConvFwd<'_>, algo: Option<ConvAlgo>) -> Result<()> {
        let (_, _, bias, _, g, relu) = op.parts();
        let flags = [("bias", bias.is_some() as i64), ("relu", relu as i64)];
        let keys = (
            || algo_key("conv2d_fwd_algo", g, &flags),
            || pointwise_key("conv2d_pointwise_fwd_select", g, bias.is_some(), relu),
        );
        self.dispatch(device, g, algo, keys, |a| match a {
            Some(a) => self.fwd_algo(device, a, op),
            None => self.fwd_general(device, op),
        })
    }

    fn conv2d_bwd(&self, device: &Device, op: &ConvBwd<'_>, algo: Option<ConvAlgo>) -> Result<()> {
        let (_, _, go, gr, g) = op.parts();
        if gr.gx.is_none() && gr.gw.is_none() {
            if let Some(gb) = gr.gb {
                let mut ev = Vec::new();
                self.bias_grad(device, go, gb, g, &mut ev)?;
            }
            return Ok(());
        }
        let flags = [
            ("gx", gr.gx.is_some() as i64),
            ("gw", gr.gw.is_some() as i64),
            ("gb", gr.gb.is_some() as i64),
        ];
        let keys = (
            || algo_key("conv2d_bwd_algo", g, &flags),
            || {
                pointwise_key(
                    "conv2d_pointwise_bwd_select",
                    g,
                    gr.gb.is_some(),
                    gr.gx.is_some(),
                )
            },
        );
        self.dispatch(device, g, algo, keys, |a| match a {
            Some(a) => self.bwd_algo(device, a, op),
            None => self.bwd_general(device, op),
        })
    }
}
