//! OpenCL depthwise convolution: the local-memory, row, tile, naive and register-block kernels, forward and
//! backward, and the measured choice between them.

#![allow(clippy::too_many_arguments)]

use std::sync::Arc;

use crate::Device;
use crate::autotune::{self, Source, TuneKey};
use crate::backend::opencl::abi::depthwise as abi;
use crate::backend::opencl::conv::nchw_key;
use crate::backend::opencl::program::{ClKernel, Defines, kernel_source};
use crate::backend::opencl::{ClDevice, Event, events_ms};
use crate::contract::depthwise::{DepthwiseKernels, DwAlgo, DwBwd, DwFwd, DwGeom};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// grad_x kernels of a stride-2 convolution on the GPU register-block path, measured per shape class
/// (`dwconv_bwd_x_s2`): `pixel` gathers one input pixel per work-item; `2x2` and `4x2` compute a block of
/// 2 or 4 columns × 2 rows of grad_x per work-item from the grad_out values the block shares
/// (`dw_bwd_x_s2_block`).
const GATHER_S2: [&str; 3] = ["pixel", "2x2", "4x2"];

/// Column pairs of a blocked gather's block, `None` for `pixel`.
fn gather_pairs(variant: &str) -> Option<usize> {
    let (c, _) = variant.split_once('x')?;
    Some(c.parse::<usize>().ok()? / 2)
}

/// grad_w units of the GPU register-block path, measured per shape class (`dwconv_bwd_w_unit`): a unit is
/// one column of 2, 4 or 8 outputs, whose input rows are read once for every tap.
const GRAD_W_UNITS: [&str; 3] = ["col2", "col4", "col8"];

/// The int8 geometry vector of the depthwise kernels.
fn arg(g: &DwGeom) -> [i32; 8] {
    [g.n, g.c, g.h, g.w, g.oh, g.ow, g.s, g.p].map(|v| v as i32)
}

/// The autotune key of `kernel` for `g`, with one family-specific flag.
fn key(kernel: &'static str, g: &DwGeom, extra: i64) -> TuneKey {
    let [n, c, h, w] = nchw_key(g.n, g.c, g.h, g.w);
    TuneKey::new(
        kernel,
        &[
            n,
            c,
            h,
            w,
            ("k", g.k as i64),
            ("s", g.s as i64),
            ("p", g.p as i64),
            ("flag", extra),
        ],
    )
    .source(kernel_source("depthwise").unwrap_or_default())
}

/// The forced algorithm: the explicit argument, else `NETCL_DWCONV_ALGO`.
fn forced(algo: Option<DwAlgo>) -> Option<(DwAlgo, &'static str)> {
    if let Some(a) = algo {
        return Some((a, "algo argument"));
    }
    match std::env::var("NETCL_DWCONV_ALGO")
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        Ok("local") => Some((DwAlgo::Local, "NETCL_DWCONV_ALGO")),
        Ok("naive") => Some((DwAlgo::Naive, "NETCL_DWCONV_ALGO")),
        Ok("tile") => Some((DwAlgo::Tile, "NETCL_DWCONV_ALGO")),
        Ok("rows") => Some((DwAlgo::Rows, "NETCL_DWCONV_ALGO")),
        Ok("block1x4") => Some((DwAlgo::Block1x4, "NETCL_DWCONV_ALGO")),
        Ok("block1x8") => Some((DwAlgo::Block1x8, "NETCL_DWCONV_ALGO")),
        Ok("block4x2") => Some((DwAlgo::Block4x2, "NETCL_DWCONV_ALGO")),
        Ok("block8x2") => Some((DwAlgo::Block8x2, "NETCL_DWCONV_ALGO")),
        Ok("block8x4") => Some((DwAlgo::Block8x4, "NETCL_DWCONV_ALGO")),
        Ok("block16x4") => Some((DwAlgo::Block16x4, "NETCL_DWCONV_ALGO")),
        _ => None,
    }
}

impl ClDevice {
    fn dw_local_ok(&self, g: &DwGeom) -> bool {
        let iw = 31 * g.s + g.k;
        let ih = 7 * g.s + g.k;
        g.k <= 7
            && (g.s == 1 || g.s == 2)
            && self.info.max_work_group_size >= 256
            && (ih * iw * 4) as u64 <= self.info.local_mem_bytes
    }

    /// The register-block kernels unroll K and the stride; grad_w needs 256-wide groups and K²·68 floats
    /// of local memory.
    fn dw_block_ok(&self, g: &DwGeom) -> bool {
        g.k <= 7
            && (g.s == 1 || g.s == 2)
            && self.info.max_work_group_size >= 256
            && (g.k * g.k * 68 * 4) as u64 <= self.info.local_mem_bytes
    }

    /// Whether `a` can run `g` on this device, with the reason when it cannot.
    fn dw_eligible(&self, a: DwAlgo, g: &DwGeom) -> Result<()> {
        let (ok, strides) = match a {
            DwAlgo::Local => (self.dw_local_ok(g), "1 or 2"),
            // float16 rows hold 16 consecutive input columns: stride 1 only.
            DwAlgo::Block16x4 => (self.dw_block_ok(g) && g.s == 1, "1"),
            _ if a.block().is_some() => (self.dw_block_ok(g), "1 or 2"),
            _ => (true, ""),
        };
        if ok {
            return Ok(());
        }
        Err(Error::Invalid(format!(
            "depthwise `{}` needs K ≤ 7, stride {strides} and 256-wide work-groups, got K = {} and stride {}",
            autotune::label(&serde_json::to_value(a).unwrap_or_default()),
            g.k,
            g.s
        )))
    }

    fn block_defines(a: DwAlgo, g: &DwGeom) -> Defines {
        let (vw, by) = a.block().unwrap_or((1, 4));
        Defines::new()
            .set("BK", g.k)
            .set("BS", g.s)
            .set("VW", vw)
            .set("BY", by)
            .set("XLOOP", a.walks_rows() as usize)
    }

    fn dw_fwd_with(&self, a: DwAlgo, op: &DwFwd<'_>) -> Result<Event> {
        let (x, w, bias, out, g) = op.parts();
        let hb = bias.is_some() as i32;
        let b = bias.unwrap_or(w);
        self.dw_eligible(a, g)?;
        // The block and local kernels take the geometry, the tensors and the bias flag (dw_fwd_block has the
        // parameters of dw_fwd_local); the others also the filter size at run time (those of dw_fwd_rows).
        let args = abi::DwFwdLocal {
            g: arg(g),
            x: x.storage(),
            w: w.storage(),
            bias: b.storage(),
            has_bias: hb,
            out: out.storage(),
        };
        let args_k = abi::DwFwdRows {
            g: arg(g),
            K: g.k as i32,
            x: x.storage(),
            w: w.storage(),
            bias: b.storage(),
            has_bias: hb,
            out: out.storage(),
        };
        match a {
            DwAlgo::Block1x4
            | DwAlgo::Block1x8
            | DwAlgo::Block4x2
            | DwAlgo::Block8x2
            | DwAlgo::Block8x4
            | DwAlgo::Block16x4 => {
                let (vw, by) = a.block().unwrap_or((1, 4));
                let kern =
                    self.kernel(abi::FAMILY, &Self::block_defines(a, g), abi::DW_FWD_BLOCK)?;
                // 8- and 16-wide blocks walk whole rows (XLOOP): one work-item per row block.
                let cols = if a.walks_rows() { 1 } else { g.ow.div_ceil(vw) };
                let items = g.n * g.c * g.oh.div_ceil(by) * cols;
                self.run(&kern, &args, &[items], Some(&[128]))
            }
            DwAlgo::Local => {
                let kern = self.dw_local_kernel(g, abi::DW_FWD_LOCAL)?;
                self.run(
                    &kern,
                    &args,
                    &[g.ow.div_ceil(32) * 32, g.oh.div_ceil(8) * 8, g.n * g.c],
                    Some(&[32, 8, 1]),
                )
            }
            DwAlgo::Rows => {
                let kern = self.dw_rows_kernel(g, abi::DW_FWD_ROWS)?;
                self.run(&kern, &args_k, &[g.n * g.c * g.oh], None)
            }
            DwAlgo::Tile => {
                let kern = self.kernel(abi::FAMILY, &Defines::new(), abi::DW_FWD_TILE)?;
                self.run(&kern, &args_k, &[g.ow, g.oh, g.n * g.c], Some(&[8, 8, 1]))
            }
            DwAlgo::Naive => {
                let kern = self.kernel(abi::FAMILY, &Defines::new(), abi::DW_FWD_NAIVE)?;
                self.run(&kern, &args_k, &[out.numel()], Some(&[64]))
            }
        }
    }

    /// The local-memory kernel `name`, built for the filter size and stride of `g` (`KS`, `SS`).
    fn dw_local_kernel(&self, g: &DwGeom, name: &str) -> Result<Arc<ClKernel>> {
        let d = Defines::new().set("KS", g.k).set("SS", g.s);
        self.kernel(abi::FAMILY, &d, name)
    }

    /// The row kernel `name`, built for the filter size and stride of `g` (`RK`, `RS`).
    fn dw_rows_kernel(&self, g: &DwGeom, name: &str) -> Result<Arc<ClKernel>> {
        let d = Defines::new().set("RK", g.k).set("RS", g.s);
        self.kernel(abi::FAMILY, &d, name)
    }

    fn dw_candidates(&self, g: &DwGeom) -> Vec<DwAlgo> {
        let mut v = Vec::new();
        // The local-memory tile pays only where local memory is on chip: on CPU OpenCL it ran 8 times slower
        // than the best kernel or worse, and it stays forcible there.
        if self.dw_local_ok(g) && self.info.local_mem_dedicated {
            v.push(DwAlgo::Local);
        }
        v.extend([DwAlgo::Rows, DwAlgo::Tile, DwAlgo::Naive]);
        if self.dw_block_ok(g) {
            v.extend([
                DwAlgo::Block1x4,
                DwAlgo::Block1x8,
                DwAlgo::Block4x2,
                DwAlgo::Block8x2,
                DwAlgo::Block8x4,
            ]);
            if g.s == 1 {
                v.push(DwAlgo::Block16x4);
            }
        }
        v
    }

    /// Band split of grad_w: about 512 (c, band) groups in all, whole output rows per band.
    fn dw_bands(&self, g: &DwGeom) -> (usize, usize) {
        let per_n = (512 / (g.c * g.n).max(1)).clamp(1, g.oh.max(1));
        let rows = g.oh.div_ceil(per_n).max(1);
        (g.oh.div_ceil(rows).max(1), rows)
    }
    fn dw_bwd_with(&self, device: &Device, a: DwAlgo, op: &DwBwd<'_>) -> Result<Vec<Event>> {
        let (x, w, go, gx, gw, g) = op.parts();
        let mut ev = Vec::new();
        let k = g.k as i32;
        if let Some(gx) = gx {
            // The grad_x kernels' arguments: geometry, grad_out, filter, grad_x (dw_bwd_x_s2 and
            // dw_bwd_x_s2_block have the parameters of dw_bwd_x_gather), and K at run time (dw_bwd_x_naive has
            // those of dw_bwd_x_rows).
            let plain = abi::DwBwdXGather {
                g: arg(g),
                go: go.storage(),
                w: w.storage(),
                gx: gx.storage(),
            };
            let with_k = abi::DwBwdXRows {
                g: arg(g),
                K: k,
                go: go.storage(),
                w: w.storage(),
                gx: gx.storage(),
            };
            match g.grad_x_geom() {
                // Stride 1: the forward kernels on grad_out with the flipped filter.
                Some(gg) if self.dw_eligible(a, &gg).is_ok() => {
                    let wf = Tensor::empty(device, w.shape(), DType::F32)?;
                    let kern = self.kernel(abi::FAMILY, &Defines::new(), abi::DW_FLIP)?;
                    ev.push(self.run(
                        &kern,
                        &abi::DwFlip {
                            C: g.c as i32,
                            K: k,
                            w: w.storage(),
                            wf: wf.storage(),
                        },
                        &[wf.numel()],
                        None,
                    )?);
                    let flipped = DwFwd {
                        x: go,
                        w: &wf,
                        bias: None,
                        out: gx,
                        g: &gg,
                    };
                    ev.push(self.dw_fwd_with(a, &flipped)?);
                }
                _ if matches!(a, DwAlgo::Block1x4 | DwAlgo::Block1x8 | DwAlgo::Block4x2) => {
                    let gather = if g.s == 2 {
                        // Default (autotuning off): `4x2`, the H200's choice.
                        autotune::tune(device, &key("dwconv_bwd_x_s2", g, 0), &GATHER_S2, 2, |v| {
                            events_ms(&[self.dw_gather(v, &plain, g)?])
                        })?
                    } else {
                        GATHER_S2[0]
                    };
                    ev.push(self.dw_gather(gather, &plain, g)?);
                }
                _ if a.walks_rows() && g.s == 2 => {
                    let kern =
                        self.kernel(abi::FAMILY, &Self::block_defines(a, g), abi::DW_BWD_X_S2)?;
                    ev.push(self.run(&kern, &plain, &[g.n * g.c * g.h], None)?);
                }
                _ if matches!(a, DwAlgo::Rows | DwAlgo::Local) || a.walks_rows() => {
                    let kern = self.dw_rows_kernel(g, abi::DW_BWD_X_ROWS)?;
                    ev.push(self.run(&kern, &with_k, &[g.n * g.c * g.h], None)?);
                }
                _ => {
                    let kern = self.kernel(abi::FAMILY, &Defines::new(), abi::DW_BWD_X_NAIVE)?;
                    ev.push(self.run(&kern, &with_k, &[gx.numel()], Some(&[64]))?);
                }
            }
        }
        match a {
            DwAlgo::Naive | DwAlgo::Tile => {
                let kern = self.kernel(abi::FAMILY, &Defines::new(), abi::DW_BWD_W_NAIVE)?;
                let args = abi::DwBwdWNaive {
                    g: arg(g),
                    K: k,
                    x: x.storage(),
                    go: go.storage(),
                    gw: gw.storage(),
                };
                ev.push(self.run(&kern, &args, &[gw.numel()], None)?);
            }
            DwAlgo::Block1x4 | DwAlgo::Block1x8 | DwAlgo::Block4x2 => {
                let unit = autotune::tune(
                    device,
                    &key("dwconv_bwd_w_unit", g, 0),
                    &GRAD_W_UNITS,
                    // Default (autotuning off): `col8`, the H200's choice at stride 1 and 2.
                    2,
                    |u| events_ms(&self.dw_grad_w_units(device, u, x, go, gw, g)?),
                )?;
                ev.extend(self.dw_grad_w_units(device, unit, x, go, gw, g)?);
            }
            DwAlgo::Local
            | DwAlgo::Rows
            | DwAlgo::Block8x2
            | DwAlgo::Block8x4
            | DwAlgo::Block16x4 => {
                let (bands_per, rows) = self.dw_bands(g);
                let bands = g.n * bands_per;
                let part = Tensor::empty(device, &[g.c * bands * g.k * g.k], DType::F32)?;
                let (bands_per, rows) = (bands_per as i32, rows as i32);
                if a == DwAlgo::Local && self.dw_local_ok(g) {
                    let kern = self.dw_local_kernel(g, abi::DW_BWD_WEIGHT_LOCAL)?;
                    let args = abi::DwBwdWeightLocal {
                        g: arg(g),
                        bands_per,
                        rows,
                        x: x.storage(),
                        go: go.storage(),
                        part: part.storage(),
                    };
                    ev.push(self.run(&kern, &args, &[g.c * 256, bands], Some(&[256, 1]))?);
                } else {
                    let kern = self.dw_rows_kernel(g, abi::DW_BWD_W_ROWS)?;
                    let args = abi::DwBwdWRows {
                        g: arg(g),
                        K: k,
                        bands_per,
                        rows,
                        x: x.storage(),
                        go: go.storage(),
                        part: part.storage(),
                    };
                    ev.push(self.run(&kern, &args, &[g.c, bands], None)?);
                }
                ev.push(self.dw_reduce(&part, gw, g, bands)?);
            }
        }
        Ok(ev)
    }

    /// Band split of the register-block grad_w: about 2048 work-groups in all, each over `per_band`
    /// consecutive units of (n, block of `by` rows, column). `per_band` is a multiple of the 256
    /// work-items, so that every work-item of a full band takes as many units. Returns (bands per
    /// channel, per_band).
    fn dw_block_bands(g: &DwGeom, by: usize) -> (usize, usize) {
        let units = g.n * g.oh.div_ceil(by) * g.ow;
        let bands = 2048usize.div_ceil(g.c).clamp(1, units.div_ceil(256).max(1));
        let per_band = units.div_ceil(bands).next_multiple_of(256);
        (units.div_ceil(per_band).max(1), per_band)
    }

    /// One candidate of the grad_x gather at stride 2 (see [`GATHER_S2`]); `args` are the geometry,
    /// grad_out, the filter and grad_x.
    fn dw_gather(&self, variant: &str, args: &abi::DwBwdXGather<'_>, g: &DwGeom) -> Result<Event> {
        match gather_pairs(variant) {
            None => {
                let defs = Defines::new()
                    .set("BK", g.k)
                    .set("BS", g.s)
                    .set("VW", 1)
                    .set("BY", 4)
                    .set("XLOOP", 0);
                let kern = self.kernel(abi::FAMILY, &defs, abi::DW_BWD_X_GATHER)?;
                // Work-groups of 128 as a row strip: the widest of 32, 16, 8 that divides W.
                let lx = [32, 16, 8]
                    .into_iter()
                    .find(|d| g.w.is_multiple_of(*d))
                    .unwrap_or(32);
                self.run(
                    &kern,
                    args,
                    &[g.w, g.h, g.n * g.c],
                    Some(&[lx, 128 / lx, 1]),
                )
            }
            Some(gc) => {
                let defs = Defines::new()
                    .set("GK", g.k)
                    .set("GC", gc)
                    .set("GP", g.p % 2);
                let kern = self.kernel(abi::FAMILY, &defs, abi::DW_BWD_X_S2_BLOCK)?;
                // 32 blocks along a row even where that pads the range: the wider strip coalesces
                // better (measured faster on the H200 than a narrower strip without padding).
                let range = [g.w.div_ceil(2 * gc), g.h.div_ceil(2), g.n * g.c];
                self.run(&kern, args, &range, Some(&[32, 4, 1]))
            }
        }
    }

    /// grad_w of the GPU register-block family with one of [`GRAD_W_UNITS`]: band partials, then their sum.
    fn dw_grad_w_units(
        &self,
        device: &Device,
        unit: &str,
        x: &Tensor,
        go: &Tensor,
        gw: &Tensor,
        g: &DwGeom,
    ) -> Result<Vec<Event>> {
        let by = unit.trim_start_matches("col").parse().unwrap_or(4);
        let (bands, per_band) = Self::dw_block_bands(g, by);
        let part = Tensor::empty(device, &[g.c * bands * g.k * g.k], DType::F32)?;
        let defs = Defines::new()
            .set("BK", g.k)
            .set("BS", g.s)
            .set("VW", 1)
            .set("BY", by)
            .set("XLOOP", 0);
        let kern = self.kernel(abi::FAMILY, &defs, abi::DW_BWD_W_BLOCK)?;
        let args = abi::DwBwdWBlock {
            g: arg(g),
            per_band: per_band as i32,
            x: x.storage(),
            go: go.storage(),
            part: part.storage(),
        };
        Ok(vec![
            self.run(&kern, &args, &[g.c * 256, bands], Some(&[256, 1]))?,
            self.dw_reduce(&part, gw, g, bands)?,
        ])
    }

    /// gw[c][t] = the sum of part[c][band][t] over `bands` bands.
    fn dw_reduce(&self, part: &Tensor, gw: &Tensor, g: &DwGeom, bands: usize) -> Result<Event> {
        let kern = self.kernel(abi::FAMILY, &Defines::new(), abi::DW_REDUCE_WEIGHT)?;
        let args = abi::DwReduceWeight {
            C: g.c as i32,
            KK: (g.k * g.k) as i32,
            bands: bands as i32,
            part: part.storage(),
            gw: gw.storage(),
        };
        self.run(&kern, &args, &[g.c * g.k * g.k], None)
    }

    fn dw_choose(
        &self,
        device: &Device,
        kernel: &'static str,
        g: &DwGeom,
        extra: i64,
        algo: Option<DwAlgo>,
        bench: impl FnMut(&DwAlgo) -> Result<f64>,
    ) -> Result<DwAlgo> {
        let key = key(kernel, g, extra);
        if let Some((a, why)) = forced(algo) {
            self.dw_eligible(a, g)?;
            autotune::record_choice(device, &key, &a, Source::Forced, why);
            return Ok(a);
        }
        if let Some(a) = autotune::answered(device, &key) {
            return Ok(a);
        }
        let cands = self.dw_candidates(g);
        // First choice before measurement, from the recorded winners: register blocks along rows on GPUs,
        // taller blocks on CPU OpenCL, else the row kernel.
        let prefer = if self.info.kind == "cpu" {
            DwAlgo::Block8x4
        } else {
            DwAlgo::Block1x4
        };
        let default = cands
            .iter()
            .position(|a| *a == prefer)
            .or_else(|| cands.iter().position(|a| *a == DwAlgo::Rows))
            .unwrap_or(0);
        autotune::tune(device, &key, &cands, default, bench)
    }
}

impl DepthwiseKernels for ClDevice {
    fn dw_fwd(&self, device: &Device, op: &DwFwd<'_>, algo: Option<DwAlgo>) -> Result<()> {
        let (_, _, bias, _, g) = op.parts();
        let a = self.dw_choose(
            device,
            "dwconv_fwd_algo",
            g,
            bias.is_some() as i64,
            algo,
            |a| events_ms(&[self.dw_fwd_with(*a, op)?]),
        )?;
        self.dw_fwd_with(a, op)?;
        Ok(())
    }

    fn dw_bwd(&self, device: &Device, op: &DwBwd<'_>, algo: Option<DwAlgo>) -> Result<()> {
        let (_, _, _, gx, _, g) = op.parts();
        let a = self.dw_choose(
            device,
            "dwconv_bwd_algo",
            g,
            gx.is_some() as i64,
            algo,
            |a| events_ms(&self.dw_bwd_with(device, *a, op)?),
        )?;
        self.dw_bwd_with(device, a, op)?;
        Ok(())
    }
}
