//! OpenCL attention (forward, backward, decode) and the transformer ops (rope, masked fill, embedding
//! gradient): the choice among the layouts `attention_layouts` offers (forced, tuned or the default) and their
//! launches.

use crate::autotune::{self, TuneKey, bucket};
use crate::backend::opencl::abi::{
    attention as abi, attention_block as bab, attention_cpu as cabi, transformer as tabi,
};
use crate::backend::opencl::attention_layouts::{
    BLOCK_MAX_D, LANES, Pass, TILES, block_candidates, block_fits, fused_candidates,
    fwd_block_form, lanes_fit, tile_local_floats,
};
use crate::backend::opencl::elementwise::half_defines;
use crate::backend::opencl::program::{Defines, kernel_source};
use crate::backend::opencl::shape::io_defines;
use crate::backend::opencl::{ClDevice, Event, events_ms};
use crate::contract::attention::{AttnAlgo, AttnGrads, AttnShape, DecodeAlgo, DecodeShape};
use crate::contract::transformer::RopePlan;
use crate::contract::{AttentionKernels, TransformerKernels};
use crate::device::{Device, DeviceType};
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// The arguments of a one-item-per-rows forward kernel (`attn_fwd_rows`, `attn_fwd_lanes`): the same
/// parameter list in two families, so two generated structs.
macro_rules! fwd_args {
    ($ty:path, $p:expr, $q:expr, $k:expr, $v:expr, $o:expr, $lse:expr) => {{
        use $ty as A;
        A {
            BH: $p.bh as i32,
            S: $p.s as i32,
            causal: i32::from($p.causal),
            scale: $p.scale,
            q: $q.storage(),
            k: $k.storage(),
            v: $v.storage(),
            o: $o.storage(),
            lse: $lse.storage(),
        }
    }};
}

/// The arguments of a one-item-per-rows dq or dk/dv kernel; the inputs of both are the same.
macro_rules! bwd_args {
    ($ty:path, $p:expr, $t:expr, $delta:expr, $($out:ident: $val:expr),+) => {
        grad_args!($ty, $p, $t, $delta; BH: $p.bh as i32, $($out: $val.storage()),+)
    };
}

/// The arguments every dq and dk/dv kernel takes (the length, causality, scale, the forward's tensors, the
/// output gradient, lse and the row terms), plus the kernel's own `fields`.
macro_rules! grad_args {
    ($ty:path, $p:expr, $t:expr, $delta:expr; $($field:ident: $val:expr),+ $(,)?) => {{
        use $ty as A;
        A {
            S: $p.s as i32,
            causal: i32::from($p.causal),
            scale: $p.scale,
            q: $t.q.storage(),
            k: $t.k.storage(),
            v: $t.v.storage(),
            g: $t.g.storage(),
            lse: $t.lse.storage(),
            delta: $delta.storage(),
            $($field: $val),+
        }
    }};
}

macro_rules! dq_args {
    ($ty:path, $p:expr, $t:expr, $delta:expr) => {
        bwd_args!($ty, $p, $t, $delta, dq: $t.dq)
    };
}

macro_rules! dkv_args {
    ($ty:path, $p:expr, $t:expr, $delta:expr) => {
        bwd_args!($ty, $p, $t, $delta, dk: $t.dk, dv: $t.dv)
    };
}

impl ClDevice {
    fn tile_fits(&self, pass: Pass, d: usize, (bq, bk, tpr): (usize, usize, usize)) -> bool {
        let regs = d.div_ceil(tpr) * if pass == Pass::Backward { 2 } else { 1 };
        tpr > 0
            && bq > 0
            && bk >= tpr
            && bk.is_multiple_of(tpr)
            && bq * tpr <= self.info.max_work_group_size
            && regs <= 128
            && (tile_local_floats(pass, d, bq, bk) * 4) as u64 <= self.info.local_mem_bytes
    }

    fn block_fits(&self, pass: Pass, d: usize, b: (usize, usize, usize, usize)) -> bool {
        block_fits(
            pass,
            d,
            b,
            self.info.max_work_group_size,
            self.info.local_mem_bytes,
        )
    }

    /// The form the forward's block layout `b` is built in here: see [`fwd_block_form`].
    fn fwd_block_features(&self, d: usize, b: (usize, usize, usize, usize)) -> (bool, bool) {
        let (bq, bk, rq, rk) = b;
        fwd_block_form(
            d,
            b,
            self.fold_shuffles((bq / rq) * (bk / rk)),
            self.async_copies(),
            self.info.local_mem_bytes,
        )
    }

    fn attn_algo(
        &self,
        device: &Device,
        p: AttnShape,
        pass: Pass,
        forced: Option<AttnAlgo>,
        mut bench: impl FnMut(AttnAlgo) -> Result<f64>,
    ) -> Result<AttnAlgo> {
        if let Some(a) = forced {
            if let AttnAlgo::Block(bq, bk, rq, rk) = a {
                if !self.block_fits(pass, p.d, (bq, bk, rq, rk)) {
                    let (what, groups) = match pass {
                        Pass::Forward => ("attention", 8),
                        Pass::Backward => ("attention backward", 4),
                    };
                    return Err(Error::Invalid(format!(
                        "{what}: layout {a:?} does not fit head dimension {} on this device (block needs D a multiple of 4 and at most {BLOCK_MAX_D}, a register block rq × rk of 4 or 8 each (4 × 4 in the backward), bq and bk multiples of it, at most {groups} float4 output groups per item, (bq/rq)·(bk/rk) ≤ {} items and its tiles in {} bytes of local memory)",
                        p.d, self.info.max_work_group_size, self.info.local_mem_bytes
                    )));
                }
                return Ok(a);
            }
            if let AttnAlgo::Fused(n, vw) = a {
                if pass == Pass::Forward {
                    return Err(Error::Invalid(format!(
                        "attention: layout {a:?} is a backward layout; the forward takes tile, block, rows or lanes"
                    )));
                }
                let why = if !matches!(vw, 1 | 4) {
                    Some("atomic adds are of 1 or 4 floats".to_owned())
                } else if vw == 4 && !self.nvidia_gpu() {
                    Some("adds of 4 floats need an NVIDIA GPU".to_owned())
                } else if !self.block_fits(Pass::Backward, p.d, (n, n, 4, 4)) {
                    Some(format!(
                        "its block (n, n, 4, 4) does not fit as the block backward would not (D a multiple of 4 and at most {BLOCK_MAX_D}, n a multiple of 4, at most 4 float4 output groups per item, (n/4)² ≤ {} items, tiles in {} bytes of local memory)",
                        self.info.max_work_group_size, self.info.local_mem_bytes
                    ))
                } else {
                    None
                };
                return match why {
                    Some(why) => Err(Error::Invalid(format!(
                        "attention: layout {a:?} does not fit head dimension {} on this device: {why}",
                        p.d
                    ))),
                    None => Ok(a),
                };
            }
            let ok = match a {
                AttnAlgo::Tile(bq, bk, t) => self.tile_fits(pass, p.d, (bq, bk, t)),
                AttnAlgo::Block(..) | AttnAlgo::Fused(..) => false, // answered above
                AttnAlgo::Rows(r) => (1..=8).contains(&r),
                AttnAlgo::Lanes(w, b) => lanes_fit(w, b),
            };
            if !ok {
                return Err(Error::Invalid(format!(
                    "attention: layout {a:?} does not fit head dimension {} on this device (tile needs bk a multiple of tpr, bq·tpr ≤ {} items and its tiles in {} bytes of local memory; rows needs 1 ≤ rq ≤ 8; lanes needs vw 4, 8 or 16 and 1 ≤ kb ≤ 16)",
                    p.d, self.info.max_work_group_size, self.info.local_mem_bytes
                )));
            }
            return Ok(a);
        }
        let mut cands: Vec<AttnAlgo> = TILES
            .iter()
            .filter(|&&t| self.tile_fits(pass, p.d, t))
            .map(|&(a, b, c)| AttnAlgo::Tile(a, b, c))
            .collect();
        let rows_from = cands.len();
        let widest = if p.d <= 64 { 4 } else { 2 };
        cands.extend(
            [1usize, 2, 4]
                .into_iter()
                .filter(|&r| r <= widest)
                .map(AttnAlgo::Rows),
        );
        let cpu = self.info.kind == DeviceType::Cpu;
        let lanes_from = cands.len();
        if cpu {
            cands.extend(LANES.iter().map(|&(w, b)| AttnAlgo::Lanes(w, b)));
        }
        // Last, so the indices above (and the default) are those of the other layouts.
        let blocks = block_candidates(
            pass,
            cpu,
            p.d,
            self.info.max_work_group_size,
            self.info.local_mem_bytes,
        );
        if pass == Pass::Backward {
            let fused = fused_candidates(&blocks, self.nvidia_gpu());
            cands.extend(blocks);
            cands.extend(fused);
        } else {
            cands.extend(blocks);
        }
        let default = if cpu {
            lanes_from
        } else if rows_from == 0 {
            rows_from + usize::from(widest > 1)
        } else {
            cands
                .iter()
                .position(|a| matches!(a, AttnAlgo::Tile(32, 32, 8)))
                .unwrap_or(0)
        };
        let kernel = match pass {
            Pass::Forward => "attention_fwd",
            Pass::Backward => "attention_bwd",
        };
        let mut key = TuneKey::new(
            kernel,
            &[
                ("bh", bucket(p.bh)),
                ("s", bucket(p.s)),
                ("d", p.d as i64),
                ("causal", i64::from(p.causal)),
            ],
        )
        .source(kernel_source("attention").unwrap_or_default());
        if cpu {
            key = key.source(kernel_source("attention_cpu").unwrap_or_default());
        } else {
            key = key.source(kernel_source("attention_block").unwrap_or_default());
        }
        autotune::tune(device, &key, &cands, default, |c| bench(*c))
    }

    fn attn_defines(p: &AttnShape, algo: AttnAlgo) -> Defines {
        let d = Defines::new().set("HD", p.d);
        match algo {
            AttnAlgo::Tile(bq, bk, t) => d.set("BQ", bq).set("BK", bk).set("TPR", t),
            AttnAlgo::Block(bq, bk, rq, rk) => d
                .set("BQ", bq)
                .set("BK", bk)
                .set("BLOCK_RQ", rq)
                .set("BLOCK_RK", rk),
            AttnAlgo::Fused(n, _) => d
                .set("BQ", n)
                .set("BK", n)
                .set("BLOCK_RQ", 4)
                .set("BLOCK_RK", 4),
            AttnAlgo::Rows(r) => d.set("RQ", r).set("KB", 8),
            AttnAlgo::Lanes(w, b) => d.set("VW", w).set("KB", b),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run_attn_fwd(
        &self,
        p: &AttnShape,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &Tensor,
        lse: &Tensor,
        algo: AttnAlgo,
    ) -> Result<Event> {
        let defs = Self::attn_defines(p, algo);
        let causal = i32::from(p.causal);
        match algo {
            AttnAlgo::Tile(bq, bk, t) => {
                let kern = self.kernel(abi::FAMILY, &defs, abi::ATTN_FWD_TILE)?;
                let ld = p.d + 1;
                let args = abi::AttnFwdTile {
                    S: p.s as i32,
                    causal,
                    scale: p.scale,
                    q: q.storage(),
                    k: k.storage(),
                    v: v.storage(),
                    o: o.storage(),
                    lse: lse.storage(),
                    qs: bq * ld * 4,
                    kv: bk * ld * 4,
                    ss: bq * (bk + 1) * 4,
                };
                let groups = p.bh * p.s.div_ceil(bq);
                self.run(&kern, &args, &[groups * bq * t], Some(&[bq * t]))
            }
            AttnAlgo::Block(bq, bk, rq, rk) => {
                let (shfl, copies) = self.fwd_block_features(p.d, (bq, bk, rq, rk));
                let defs = defs
                    .set("NCL_SHFL", i32::from(shfl))
                    .set("NCL_ASYNC", i32::from(copies))
                    .set("ATTN_PART", 1);
                let kern = self.kernel(bab::FAMILY, &defs, bab::ATTN_FWD_BLOCK)?;
                let args = bab::AttnFwdBlock {
                    S: p.s as i32,
                    causal,
                    scale: p.scale,
                    q: q.storage(),
                    k: k.storage(),
                    v: v.storage(),
                    o: o.storage(),
                    lse: lse.storage(),
                };
                let items = (bq / rq) * (bk / rk);
                let groups = p.bh * p.s.div_ceil(bq);
                self.run(&kern, &args, &[groups * items], Some(&[items]))
            }
            AttnAlgo::Rows(r) => {
                let kern = self.kernel(abi::FAMILY, &defs, abi::ATTN_FWD_ROWS)?;
                let args = fwd_args!(abi::AttnFwdRows, p, q, k, v, o, lse);
                self.run(&kern, &args, &[p.bh * p.s.div_ceil(r)], None)
            }
            AttnAlgo::Lanes(w, _) => {
                let kern = self.kernel(cabi::FAMILY, &defs, cabi::ATTN_FWD_LANES)?;
                let args = fwd_args!(cabi::AttnFwdLanes, p, q, k, v, o, lse);
                self.run(&kern, &args, &[p.bh * p.s.div_ceil(w)], Some(&[1]))
            }
            AttnAlgo::Fused(..) => Err(Error::Invalid(format!(
                "attention: layout {algo:?} is a backward layout"
            ))),
        }
    }

    /// The dq and dk/dv launches (the row terms `delta` already computed); the fused layout's are the clearing
    /// of dq and the one backward kernel.
    fn run_attn_bwd(
        &self,
        p: &AttnShape,
        t: &AttnGrads<'_>,
        delta: &Tensor,
        algo: AttnAlgo,
    ) -> Result<[Event; 2]> {
        let defs = Self::attn_defines(p, algo);
        // The dk/dv kernels copy their streamed tiles asynchronously where the device can (no more local
        // memory: the next tile's copies start once the current one's last reader is done). A build holds
        // only the kernels its launches run (`ATTN_PART`: 2 dq and dk/dv, 3 the fused kernel).
        let copies = i32::from(self.async_copies());
        let defs = match algo {
            AttnAlgo::Block(..) => defs.set("NCL_ASYNC", copies).set("ATTN_PART", 2),
            AttnAlgo::Fused(..) => defs.set("NCL_ASYNC", copies).set("ATTN_PART", 3),
            _ => defs,
        };
        match algo {
            AttnAlgo::Fused(n, vw) => {
                let red = if self.nvidia_gpu() { vw } else { 0 };
                let defs = defs.set("NCL_RED", red);
                let e1 = self.fill_timed(t.dq.storage(), [0; 4], t.dq.numel() * 4)?;
                let items = (n / 4) * (n / 4);
                let global = [p.bh * p.s.div_ceil(n) * items];
                let kf = self
                    .kernel(bab::FAMILY, &defs, bab::ATTN_BWD_BLOCK)
                    .map_err(|e| match red {
                        4 => Error::Invalid(format!(
                            "attention backward: layout {algo:?} did not build on this device: its four-float atomic adds (red.global.v4.f32.add) need an NVIDIA GPU of sm_90 or later whose driver takes PTX 8.1 ({e})"
                        )),
                        _ => e,
                    })?;
                let a = grad_args!(bab::AttnBwdBlock, p, t, delta;
                    dk: t.dk.storage(),
                    dv: t.dv.storage(),
                    dq: t.dq.storage(),
                );
                let e2 = self.run(&kf, &a, &global, Some(&[items]))?;
                Ok([e1, e2])
            }
            AttnAlgo::Block(bq, bk, rq, rk) => {
                let items = (bq / rq) * (bk / rk);
                let global = [p.bh * p.s.div_ceil(bq) * items];
                let local = Some(&[items][..]);
                let kq = self.kernel(bab::FAMILY, &defs, bab::ATTN_DQ_BLOCK)?;
                let a = grad_args!(bab::AttnDqBlock, p, t, delta;
                    dq: t.dq.storage(),
                );
                let e1 = self.run(&kq, &a, &global, local)?;
                let kk = self.kernel(bab::FAMILY, &defs, bab::ATTN_DKV_BLOCK)?;
                let b = grad_args!(bab::AttnDkvBlock, p, t, delta;
                    dk: t.dk.storage(),
                    dv: t.dv.storage(),
                );
                let e2 = self.run(&kk, &b, &global, local)?;
                Ok([e1, e2])
            }
            AttnAlgo::Tile(bq, bk, tpr) => {
                let ld = p.d + 1;
                let groups = p.bh * p.s.div_ceil(bq);
                let kq = self.kernel(abi::FAMILY, &defs, abi::ATTN_DQ_TILE)?;
                let a = grad_args!(abi::AttnDqTile, p, t, delta;
                    dq: t.dq.storage(),
                    qs: bq * ld * 4,
                    gs: bq * ld * 4,
                    ks: bk * ld * 4,
                    vs: bk * ld * 4,
                    ss: bq * (bk + 1) * 4,
                );
                let e1 = self.run(&kq, &a, &[groups * bq * tpr], Some(&[bq * tpr]))?;
                let kk = self.kernel(abi::FAMILY, &defs, abi::ATTN_DKV_TILE)?;
                let b = grad_args!(abi::AttnDkvTile, p, t, delta;
                    dk: t.dk.storage(),
                    dv: t.dv.storage(),
                    ks: bq * ld * 4,
                    vs: bq * ld * 4,
                    qs: bk * ld * 4,
                    gs: bk * ld * 4,
                    ps: bq * (bk + 1) * 4,
                    ds: bq * (bk + 1) * 4,
                );
                let e2 = self.run(&kk, &b, &[groups * bq * tpr], Some(&[bq * tpr]))?;
                Ok([e1, e2])
            }
            AttnAlgo::Rows(r) => {
                let items = p.bh * p.s.div_ceil(r);
                let kq = self.kernel(abi::FAMILY, &defs, abi::ATTN_DQ_ROWS)?;
                let e1 = self.run(&kq, &dq_args!(abi::AttnDqRows, p, t, delta), &[items], None)?;
                let kk = self.kernel(abi::FAMILY, &defs, abi::ATTN_DKV_ROWS)?;
                let e2 = self.run(
                    &kk,
                    &dkv_args!(abi::AttnDkvRows, p, t, delta),
                    &[items],
                    None,
                )?;
                Ok([e1, e2])
            }
            AttnAlgo::Lanes(w, _) => {
                let items = p.bh * p.s.div_ceil(w);
                let one = Some(&[1usize][..]);
                let kq = self.kernel(cabi::FAMILY, &defs, cabi::ATTN_DQ_LANES)?;
                let e1 = self.run(
                    &kq,
                    &dq_args!(cabi::AttnDqLanes, p, t, delta),
                    &[items],
                    one,
                )?;
                let kk = self.kernel(cabi::FAMILY, &defs, cabi::ATTN_DKV_LANES)?;
                let e2 = self.run(
                    &kk,
                    &dkv_args!(cabi::AttnDkvLanes, p, t, delta),
                    &[items],
                    one,
                )?;
                Ok([e1, e2])
            }
        }
    }

    fn decode_algo(
        &self,
        device: &Device,
        p: DecodeShape,
        forced: Option<DecodeAlgo>,
        mut bench: impl FnMut(DecodeAlgo) -> Result<f64>,
    ) -> Result<DecodeAlgo> {
        let max_wg = self.info.max_work_group_size;
        let fits_wg = |l: usize| {
            (32..=max_wg).contains(&l) && ((p.d + l + 2) * 4) as u64 <= self.info.local_mem_bytes
        };
        if let Some(a) = forced {
            let ok = match a {
                DecodeAlgo::Wg(l, c) => fits_wg(l) && (1..=p.len).contains(&c),
                DecodeAlgo::Item(c) => (1..=p.len).contains(&c),
                DecodeAlgo::Lanes(w, c) => {
                    matches!(w, 4 | 8 | 16)
                        && p.d.is_multiple_of(w)
                        && (1..=p.len.min(64)).contains(&c)
                }
            };
            if !ok {
                return Err(Error::Invalid(format!(
                    "attention_decode: layout {a:?} does not fit {} cached positions of head dimension {} on this device (wg needs 32 ≤ local ≤ {max_wg}; chunks between 1 and the length; lanes needs vw 4, 8 or 16 dividing the head dimension and at most 64 chunks)",
                    p.len, p.d
                )));
            }
            return Ok(a);
        }
        let chunks: Vec<usize> = [1usize, 4, 16, 64]
            .into_iter()
            .filter(|&c| c <= p.len)
            .collect();
        let mut cands: Vec<DecodeAlgo> = Vec::new();
        for l in [64usize, 128, 256] {
            if fits_wg(l) {
                cands.extend(chunks.iter().map(|&c| DecodeAlgo::Wg(l, c)));
            }
        }
        let items_from = cands.len();
        cands.extend(chunks.iter().map(|&c| DecodeAlgo::Item(c)));
        let cpu = self.info.kind == DeviceType::Cpu;
        let lanes_from = cands.len();
        // CPU devices also get the vector layout at the widest width that divides the head dimension.
        if let Some(w) = [16usize, 8, 4]
            .into_iter()
            .find(|w| p.d.is_multiple_of(*w))
            .filter(|_| cpu)
        {
            cands.extend(
                [1usize, 4, 16]
                    .into_iter()
                    .filter(|&c| c <= p.len)
                    .map(|c| DecodeAlgo::Lanes(w, c)),
            );
        }
        let default = if cpu && lanes_from < cands.len() {
            lanes_from
        } else if cpu || items_from == 0 {
            lanes_from - 1
        } else {
            cands
                .iter()
                .position(|a| *a == DecodeAlgo::Wg(128, 16))
                .unwrap_or(0)
        };
        let mut key = TuneKey::new(
            "attention_decode",
            &[
                ("bh", bucket(p.bh)),
                ("len", bucket(p.len)),
                ("d", p.d as i64),
            ],
        )
        .source(kernel_source("attention").unwrap_or_default());
        if cpu {
            key = key.source(kernel_source("attention_cpu").unwrap_or_default());
        }
        autotune::tune(device, &key, &cands, default, |c| bench(*c))
    }

    #[allow(clippy::too_many_arguments)]
    fn run_decode(
        &self,
        p: &DecodeShape,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &Tensor,
        part: &Tensor,
        algo: DecodeAlgo,
    ) -> Result<Vec<Event>> {
        let defs = Defines::new().set("HD", p.d);
        let nc = match algo {
            DecodeAlgo::Wg(_, c) | DecodeAlgo::Item(c) | DecodeAlgo::Lanes(_, c) => c,
        };
        let e1 = match algo {
            DecodeAlgo::Lanes(w, c) => {
                let defs = defs.clone().set("VW", w).set("KB", 16);
                let kern = self.kernel(cabi::FAMILY, &defs, cabi::ATTN_DECODE_LANES)?;
                let args = cabi::AttnDecodeLanes {
                    BH: p.bh as i32,
                    C: p.cap as i32,
                    L: p.len as i32,
                    NC: c as i32,
                    scale: p.scale,
                    q: q.storage(),
                    k: k.storage(),
                    v: v.storage(),
                    part: part.storage(),
                    o: o.storage(),
                };
                let e = self.run(&kern, &args, &[p.bh * c], Some(&[1]))?;
                if c == 1 {
                    return Ok(vec![e]);
                }
                e
            }
            DecodeAlgo::Wg(l, c) => {
                let kern = self.kernel(abi::FAMILY, &defs, abi::ATTN_DECODE_WG)?;
                let args = abi::AttnDecodeWg {
                    C: p.cap as i32,
                    L: p.len as i32,
                    NC: c as i32,
                    scale: p.scale,
                    q: q.storage(),
                    k: k.storage(),
                    v: v.storage(),
                    part: part.storage(),
                    qs: p.d * 4,
                    ss: l * 4,
                };
                self.run(&kern, &args, &[p.bh * c * l], Some(&[l]))?
            }
            DecodeAlgo::Item(c) => {
                let kern = self.kernel(abi::FAMILY, &defs, abi::ATTN_DECODE_ITEM)?;
                let args = abi::AttnDecodeItem {
                    BH: p.bh as i32,
                    C: p.cap as i32,
                    L: p.len as i32,
                    NC: c as i32,
                    scale: p.scale,
                    q: q.storage(),
                    k: k.storage(),
                    v: v.storage(),
                    part: part.storage(),
                };
                self.run(&kern, &args, &[p.bh * c], None)?
            }
        };
        let kern = self.kernel(abi::FAMILY, &defs, abi::ATTN_DECODE_COMBINE)?;
        let args = abi::AttnDecodeCombine {
            BH: p.bh as i32,
            NC: nc as i32,
            part: part.storage(),
            o: o.storage(),
        };
        let e2 = self.run(&kern, &args, &[p.bh * p.d], None)?;
        Ok(vec![e1, e2])
    }
}

impl AttentionKernels for ClDevice {
    fn attention_forward(
        &self,
        device: &Device,
        p: AttnShape,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &Tensor,
        lse: &Tensor,
        algo: Option<AttnAlgo>,
    ) -> Result<()> {
        let a = self.attn_algo(device, p, Pass::Forward, algo, |c| {
            events_ms(&[self.run_attn_fwd(&p, q, k, v, o, lse, c)?])
        })?;
        self.run_attn_fwd(&p, q, k, v, o, lse, a)?;
        Ok(())
    }

    fn attention_backward(
        &self,
        device: &Device,
        p: AttnShape,
        t: &AttnGrads<'_>,
        algo: Option<AttnAlgo>,
    ) -> Result<()> {
        let rows = p.bh * p.s;
        let delta = Tensor::empty(device, &[rows], DType::F32)?;
        let kern = self.kernel(abi::FAMILY, &Defines::new().set("HD", p.d), abi::ATTN_DELTA)?;
        let args = abi::AttnDelta {
            N: rows as i32,
            o: t.o.storage(),
            g: t.g.storage(),
            delta: delta.storage(),
        };
        self.run(&kern, &args, &[rows], None)?;
        let a = self.attn_algo(device, p, Pass::Backward, algo, |c| {
            events_ms(&self.run_attn_bwd(&p, t, &delta, c)?)
        })?;
        self.run_attn_bwd(&p, t, &delta, a)?;
        Ok(())
    }

    fn attention_decode(
        &self,
        device: &Device,
        p: DecodeShape,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &Tensor,
        algo: Option<DecodeAlgo>,
    ) -> Result<()> {
        // Room for the partial results of the most chunks any candidate uses.
        let part = Tensor::empty(device, &[p.bh * 64.min(p.len) * (p.d + 2)], DType::F32)?;
        let a = self.decode_algo(device, p, algo, |c| {
            events_ms(&self.run_decode(&p, q, k, v, o, &part, c)?)
        })?;
        self.run_decode(&p, q, k, v, o, &part, a)?;
        Ok(())
    }
}

impl TransformerKernels for ClDevice {
    fn rope(&self, p: RopePlan, x: &Tensor, pos: &Tensor, y: &Tensor) -> Result<()> {
        let kern = self.kernel(tabi::FAMILY, &io_defines(x, y), tabi::ROPE_PAIRS)?;
        let args = tabi::RopePairs {
            rows: p.rows as i32,
            S: p.s as i32,
            HDIM: p.d as i32,
            base: p.base,
            sgn: if p.inverse { -1.0 } else { 1.0 },
            x: x.storage(),
            pos: pos.storage(),
            y: y.storage(),
        };
        let local = 64.min(self.info.max_work_group_size.max(1));
        self.run(&kern, &args, &[p.rows * (p.d / 2)], Some(&[local]))?;
        Ok(())
    }

    fn masked_fill(&self, x: &Tensor, mask: &Tensor, value: f32, y: &Tensor) -> Result<()> {
        let d = half_defines(io_defines(x, y), &[("B_HALF", mask)]);
        let kern = self.kernel(tabi::FAMILY, &d, tabi::MASKED_FILL)?;
        let args = tabi::MaskedFill {
            N: x.numel() as i32,
            M: mask.numel() as i32,
            value,
            x: x.storage(),
            mask: mask.storage(),
            y: y.storage(),
        };
        let local = 64.min(self.info.max_work_group_size.max(1));
        self.run(&kern, &args, &[x.numel()], Some(&[local]))?;
        Ok(())
    }

    fn embedding_grad(&self, idx: &Tensor, g: &Tensor, e: usize, dw: &Tensor) -> Result<()> {
        let n = idx.numel();
        let d = half_defines(Defines::new(), &[("IN_HALF", g)]);
        let kern = self.kernel(tabi::FAMILY, &d, tabi::EMBEDDING_GRAD)?;
        let args = tabi::EmbeddingGrad {
            N: n as i32,
            E: e as i32,
            idx: idx.storage(),
            g: g.storage(),
            dw: dw.storage(),
        };
        let local = 64.min(self.info.max_work_group_size.max(1));
        self.run(&kern, &args, &[n * e], Some(&[local]))?;
        Ok(())
    }
}
