//! Tensor-core GEMM (`kernels/gemm_tc.cl`): TF32 and FP16 products through PTX `mma.sync`, offered to the
//! autotuner beside the FP32 candidates when a product's precision asks for them and the device has usable
//! tensor cores.
//!
//! Usable means probed, never assumed from a name: on an NVIDIA GPU the kernel is built with its PTX and run
//! once per device and process on a product whose exact result is known; only if it builds and computes that
//! result are tensor-core candidates offered. Anywhere else (PoCL, other vendors, a failed probe) a TF32 or
//! FP16 product runs the FP32 kernels, and the decision log records why. `NETCL_TC_EMULATE=1` makes every
//! device usable with each mma emulated in OpenCL C, cooperatively through local memory (see the kernel).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Value, json};

use super::gemm::{Algo, GemmCand, tune_key};
use crate::Device;
use crate::autotune::{self, Source, TuneKey};
use crate::backend::opencl::abi::gemm_tc as abi;
use crate::backend::opencl::program::{Defines, ProgramSpec, quick_key};
use crate::backend::opencl::{ClDevice, Event};
use crate::contract::Backend;
use crate::contract::gemm::{BiasMode, Gemm, GemmOp};
use crate::contract::precision::{Math, Precision, emulated};
use crate::error::{Error, Result};
use crate::memory::{Allocator, Storage};

/// Work-items of every tensor-core work-group: 8 warps of 32.
const THREADS: usize = 256;

/// One tile configuration of the tensor-core kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TcTile {
    /// TF32 or FP16.
    pub prec: Precision,
    /// The block tile (rows × columns of C) and its K tile.
    pub bm: usize,
    pub bn: usize,
    pub bk: usize,
    /// The warp tile; (bm / wm) · (bn / wn) = 8 warps.
    pub wm: usize,
    pub wn: usize,
    /// 0: `gemm_tc`, operand tiles staged through registers into two local buffers; 2 to 4: `gemm_tc_pipe`, that
    /// many local buffers filled by `cp.async` copies, fragments read by `ldmatrix`.
    pub stages: usize,
}

impl TcTile {
    /// The candidate's label value: `["tc_tf32", bm, bn, bk, wm, wn]`, or for the pipelined kernel
    /// `["tc_tf32_async", bm, bn, bk, wm, wn, stages]`.
    pub(crate) fn label_value(&self) -> Value {
        let name = format!("tc_{}", self.prec.name());
        let (bm, bn, bk, wm, wn) = (self.bm, self.bn, self.bk, self.wm, self.wn);
        match self.stages {
            0 => json!([name, bm, bn, bk, wm, wn]),
            s => json!([format!("{name}_async"), bm, bn, bk, wm, wn, s]),
        }
    }

    /// The program's kernel: `gemm_tc` or `gemm_tc_pipe`.
    fn kernel(&self) -> &'static str {
        match self.stages {
            0 => abi::GEMM_TC,
            _ => abi::GEMM_TC_PIPE,
        }
    }

    /// Elements of one 16-byte `cp.async` copy (4 f32 for TF32, 8 f16 for FP16).
    fn chunk(&self) -> usize {
        match self.prec {
            Precision::Fp16 => 8,
            _ => 4,
        }
    }
}

/// A tile configuration: (bm, bn, bk, wm, wn, stages), stages 0 for `gemm_tc`. `bk` is given for f32 elements in
/// local memory; FP16 keeps halves there, so its tiles take twice that `bk` in the same bytes.
type Tile = (usize, usize, usize, usize, usize, usize);

/// Tiles of `gemm_tc`, largest first. K tiles of 16 keep the double-buffered f32 tiles of the 128×128 block
/// within 48 KiB of local memory.
const STAGED: [Tile; 4] = [
    (128, 128, 16, 64, 32, 0),
    (128, 64, 16, 32, 32, 0),
    (64, 128, 16, 32, 32, 0),
    (64, 64, 16, 32, 16, 0),
];

/// Pipelined tiles (`gemm_tc_pipe`): unpadded swizzled buffers, as many as fit 48 KiB (four of the 128×256 tile
/// with K tiles of 8 f32, three of the 128×128 tile with 16), in every transpose. The 64×64 warp tiles of the
/// 128×256 block issue a fifth fewer instructions per mma than the 64×32 ones (about 210 registers, one
/// work-group a multiprocessor); `ptxas` for sm_90 puts the others at 48 to 160 registers, none spilling
/// (`scripts/ptx-check.sh`).
const PIPELINED: [Tile; 6] = [
    (128, 256, 8, 64, 64, 4),
    (128, 128, 16, 64, 32, 3),
    (128, 128, 8, 64, 32, 4),
    (128, 64, 16, 32, 32, 4),
    (64, 128, 16, 32, 32, 4),
    (64, 64, 32, 32, 16, 3),
];

/// The tiles of `list` for precision `p` (none for FP32).
fn tile_list(p: Precision, list: &'static [Tile]) -> impl Iterator<Item = TcTile> {
    let (list, k): (&[Tile], usize) = match p {
        Precision::Tf32 => (list, 1),
        Precision::Fp16 => (list, 2),
        Precision::Fp32 => (&[], 1),
    };
    list.iter()
        .map(move |&(bm, bn, bk, wm, wn, stages)| TcTile {
            prec: p,
            bm,
            bn,
            bk: bk * k,
            wm,
            wn,
            stages,
        })
}

/// The register-staged tiles of `p` (`gemm_tc`), largest first.
fn tiles(p: Precision) -> impl Iterator<Item = TcTile> {
    tile_list(p, &STAGED)
}

/// The pipelined tiles of `p` (`gemm_tc_pipe`), largest first.
fn pipe_tiles(p: Precision) -> impl Iterator<Item = TcTile> {
    tile_list(p, &PIPELINED)
}

/// The local memory tile `t` takes for `g` (its operand buffers, two or `stages`, with the padding of the
/// kernel, plus the emulation's scratch when emulated).
fn local_bytes(g: &Gemm, t: &TcTile, emulate: bool) -> usize {
    let (elem, pad_k, kstep) = match t.prec {
        Precision::Fp16 => (2, 8, 16),
        _ => (4, 4, 8),
    };
    // The register-staged kernel pads its rows; the pipelined one swizzles them unpadded.
    let (pad_k, pad_mn) = match t.stages {
        0 => (pad_k, 8),
        _ => (0, 0),
    };
    let a = if g.trans_a {
        t.bk * (t.bm + pad_mn)
    } else {
        t.bm * (t.bk + pad_k)
    };
    let b = if g.trans_b {
        t.bn * (t.bk + pad_k)
    } else {
        t.bk * (t.bn + pad_mn)
    };
    let scratch = match (emulate, t.stages) {
        (false, _) => 0,
        (true, 0) => 8 * (16 * kstep + kstep * 8) * 4,
        // The pipelined kernel's emulated ldmatrix passes 32 addresses a warp.
        (true, _) => 8 * (16 * kstep + kstep * 8) * 4 + 8 * 32 * 4,
    };
    t.stages.max(2) * (a + b) * elem + scratch
}

/// Whether the pipelined kernel can run `g` at tile `t`'s precision: operands stored as the precision
/// multiplies them (TF32 from f32, FP16 from f16), and every row and batch start of A and B on 16 bytes (the
/// `cp.async` copies), C's on 4 elements.
fn pipe_fits(g: &Gemm, t: &TcTile) -> bool {
    let e = t.chunk();
    (t.prec == Precision::Fp16) == g.math.f16_io
        && aligned(g)
        && [g.lda, g.off_a, g.s_a, g.ldb, g.off_b, g.s_b]
            .iter()
            .all(|v| v % e == 0)
}

/// Whether every row and batch start of A, B and C lies on a multiple of 4 elements (vector global access).
fn aligned(g: &Gemm) -> bool {
    [
        g.lda, g.off_a, g.s_a, g.ldb, g.off_b, g.s_b, g.ldc, g.off_c, g.s_c,
    ]
    .iter()
    .all(|v| v % 4 == 0)
}

/// The defines of tile `t` for `g`; `ptx` selects the PTX mma (else the emulation).
fn defines(g: &Gemm, t: &TcTile, aligned: bool, ptx: bool) -> Defines {
    let half = g.math.f16_io as i32;
    Defines::new()
        .set("TC_PTX", ptx as i32)
        .set("PREC", (t.prec == Precision::Fp16) as i32)
        .set("A_HALF", half)
        .set("B_HALF", half)
        .set("OUT_HALF", half)
        .set("TRANS_A", g.trans_a as i32)
        .set("TRANS_B", g.trans_b as i32)
        .set("BM", t.bm)
        .set("BN", t.bn)
        .set("BK", t.bk)
        .set("WM", t.wm)
        .set("WN", t.wn)
        .set("VEC", aligned as i32)
        .set("STAGES", t.stages)
}

/// The autotune kernel name of a product: `base` itself on the FP32 kernels, else with the precision (and
/// `_f16io` for f16 storage, `_emulated` under `NETCL_TC_EMULATE`), so that FP32 winners are never reused for
/// tensor-core lists or back.
pub(crate) fn tuned_name(g: &Gemm, tc: bool, base: &'static str) -> Cow<'static, str> {
    if !tc {
        return Cow::Borrowed(base);
    }
    Cow::Owned(format!(
        "{base}_{}{}{}",
        g.math.precision.name(),
        if g.math.f16_io { "_f16io" } else { "" },
        if emulated().unwrap_or(false) {
            "_emulated"
        } else {
            ""
        }
    ))
}

/// The programs tile `t` launches for `g`.
pub(crate) fn programs(g: &Gemm, t: &TcTile) -> Vec<ProgramSpec> {
    let ptx = !emulated().unwrap_or(false);
    vec![(abi::FAMILY, t.kernel(), defines(g, t, aligned(g), ptx))]
}

/// Probe results per OpenCL device id and kernel (TF32, FP16, pipelined TF32, pipelined FP16): `Err` holds
/// why that kernel is not used.
type Probes = HashMap<usize, [Option<std::result::Result<(), String>>; 4]>;
static PROBES: Mutex<Option<Probes>> = Mutex::new(None);

fn slot(p: Precision) -> usize {
    (p == Precision::Fp16) as usize
}

/// The probe result of kernel slot `at` on device `id`, if this process has probed it.
fn probed(id: usize, at: usize) -> Option<std::result::Result<(), String>> {
    PROBES
        .lock()
        .ok()
        .and_then(|m| m.as_ref()?.get(&id)?[at].clone())
}

/// Whether the pipelined tiles are offered, given what is known of their probe: until the probe has run they
/// are (it runs when one of them is first launched, so a first call that runs the register-staged first choice
/// pays for no probe); after a failed probe they are not.
fn pipe_offered(known: Option<std::result::Result<(), String>>) -> bool {
    !matches!(known, Some(Err(_)))
}

impl ClDevice {
    /// Whether tensor cores compute products at `p` (TF32 or FP16) on this device: `Ok`, or why not.
    pub(crate) fn tc_status(&self, p: Precision) -> std::result::Result<(), String> {
        self.kernel_status(p, false)
    }

    /// Whether the pipelined kernel (`cp.async`, `ldmatrix`) computes products at `p` here: `Ok`, or why not.
    /// Asked only where [`ClDevice::tc_status`] is `Ok`.
    pub(crate) fn tc_pipe_status(&self, p: Precision) -> std::result::Result<(), String> {
        self.tc_status(p)?;
        self.kernel_status(p, true)
    }

    fn kernel_status(&self, p: Precision, pipe: bool) -> std::result::Result<(), String> {
        if p == Precision::Fp32 {
            return Err("FP32 needs no tensor cores".into());
        }
        match emulated() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => return Err(e.to_string()),
        }
        let id = self.device.id() as usize;
        let at = slot(p) + 2 * pipe as usize;
        if let Some(r) = probed(id, at) {
            return r;
        }
        let r = self.tc_probe(p, pipe);
        if let Err(why) = &r {
            let what = if pipe {
                "pipelined tensor-core kernel"
            } else {
                "tensor cores"
            };
            tracing::info!("{} {what} on {}: {why}", p.name(), self.info.name);
        }
        if let Ok(mut m) = PROBES.lock() {
            m.get_or_insert_with(HashMap::new).entry(id).or_default()[at] = Some(r.clone());
        }
        r
    }

    /// Whether tensor-core candidates are offered at `p`.
    pub(crate) fn tc_capable(&self, p: Precision) -> bool {
        self.tc_status(p).is_ok()
    }

    /// Builds a tensor-core kernel with its PTX (the pipelined one if `pipe`) and runs it on a 20×24×40 product
    /// of small integers (exact in TF32 and FP16, and summed exactly in f32; the pipelined FP16 kernel reads and
    /// writes them as f16), over a K of several tiles; `Ok` only if it builds and every element is exact. The
    /// pipelined kernel is probed in a context of its own, so that a fault of its copies cannot end this
    /// device's context. Never an error to the caller: a failure is the reason the kernel is not used.
    fn tc_probe(&self, p: Precision, pipe: bool) -> std::result::Result<(), String> {
        if !self.nvidia_gpu() {
            return Err("not an NVIDIA GPU".into());
        }
        if self.info.max_work_group_size < THREADS {
            return Err(format!("work-groups of {THREADS} work-items do not fit"));
        }
        let (m, n, k) = (20usize, 24usize, 40usize);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i / k * 7 + i % k * 3) % 9) as f32 - 4.0)
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i / n * 5 + i % n * 11) % 7) as f32 - 3.0)
            .collect();
        let want: Vec<f32> = (0..m * n)
            .map(|i| {
                let (r, c) = (i / n, i % n);
                (0..k).map(|p| a[r * k + p] * b[p * n + c]).sum()
            })
            .collect();
        let mut g = Gemm::dense(m, n, k, 1, false, false, false);
        g.math = Math::f32_at(p);
        let list = if pipe {
            pipe_tiles(p).last()
        } else {
            tiles(p).last()
        };
        let tile = list.ok_or_else(|| "no tile configuration".to_string())?;
        // f16 storage where the pipelined FP16 kernel needs it: every value and sum is exact in f16 too.
        let half = pipe && p == Precision::Fp16;
        g.math.f16_io = half;
        let own;
        let dev = if pipe {
            own = ClDevice::new(self.device.id(), self.info.clone())
                .map_err(|e| format!("no context for the probe: {e}"))?;
            &own
        } else {
            self
        };
        let elem = if half { 2 } else { 4 };
        let run = || -> Result<Vec<f32>> {
            let upload = |v: &[f32]| -> Result<Storage> {
                let bytes: Vec<u8> = match half {
                    true => v
                        .iter()
                        .flat_map(|&x| crate::half::f32_to_f16(x).to_ne_bytes())
                        .collect(),
                    false => bytemuck::cast_slice(v).to_vec(),
                };
                let s = dev.alloc(bytes.len())?;
                dev.write(&s, 0, &bytes)?;
                Ok(s)
            };
            let (sa, sb) = (upload(&a)?, upload(&b)?);
            let sc = dev.alloc(m * n * elem)?;
            dev.launch_tc(&g, &tile, [&sa, &sb, &sc], None, true)?;
            let mut out = vec![0u8; m * n * elem];
            dev.read(&sc, 0, &mut out)?;
            Ok(out
                .chunks_exact(elem)
                .map(|c| match half {
                    true => crate::half::f16_to_f32(u16::from_ne_bytes([c[0], c[1]])),
                    false => f32::from_ne_bytes([c[0], c[1], c[2], c[3]]),
                })
                .collect())
        };
        let got = run().map_err(|e| format!("the probe kernel failed: {e}"))?;
        match got.iter().zip(&want).position(|(x, y)| x != y) {
            None => Ok(()),
            Some(i) => Err(format!(
                "the probe product is wrong at ({}, {}): {} instead of {}",
                i / n,
                i % n,
                got[i],
                want[i]
            )),
        }
    }

    /// Whether `g` runs on tensor cores: its precision asks for them and they are usable here. A TF32 or FP16
    /// product on a device without them runs the FP32 kernels; that is logged (once per logging scope) as a
    /// decision of the precision-keyed kernel (`matmul_tf32`, …) with the reason.
    pub(crate) fn tc_active(&self, device: &Device, g: &Gemm) -> Result<bool> {
        let p = g.math.precision;
        if p == Precision::Fp32 {
            return Ok(false);
        }
        emulated()?;
        match self.tc_status(p) {
            Ok(()) => Ok(true),
            Err(why) if g.math.f16_io => Err(Error::Invalid(format!(
                "an f16 product on tensor cores, which this device cannot use ({why})"
            ))),
            Err(why) => {
                let fp32 = tune_key(g, false);
                let key = TuneKey::from_shape_key(
                    format!("{}_{}", fp32.kernel(), p.name()),
                    fp32.shape_key().to_owned(),
                );
                autotune::record_once(autotune::unmeasured(
                    device,
                    &key,
                    &"fp32",
                    Source::Only,
                    format!(
                        "tensor cores not available on this device ({why}): FP32 kernels for {}",
                        p.name()
                    ),
                ));
                Ok(false)
            }
        }
    }

    /// The tensor-core candidates for `g`: none unless its precision asks for them and the device can use
    /// them. They depend only on what `g`'s tune key holds (bucketed sizes, transposes, precision).
    pub(crate) fn tc_candidates(&self, g: &Gemm) -> Vec<GemmCand> {
        let p = g.math.precision;
        if p == Precision::Fp32 || !self.tc_capable(p) {
            return Vec::new();
        }
        let emulate = emulated().unwrap_or(false);
        let lmem = self.info.local_mem_bytes as usize;
        let wis = &self.info.max_work_item_sizes;
        if self.info.max_work_group_size < THREADS || wis.first().is_some_and(|&x| x < THREADS) {
            return Vec::new();
        }
        let (bm, bn) = (g.m.next_power_of_two(), g.n.next_power_of_two());
        // The pipelined tiles follow the register-staged ones (whose first is the untimed first choice). Their
        // probe waits for their first launch (`gemm_tc_with`); once it has failed they are left out.
        let known = match emulate {
            true => Some(Ok(())),
            false => probed(self.device.id() as usize, slot(p) + 2),
        };
        let pipe: Vec<TcTile> = match pipe_offered(known) {
            true => pipe_tiles(p).filter(|t| pipe_fits(g, t)).collect(),
            false => Vec::new(),
        };
        tiles(p)
            .chain(pipe)
            // A tile far larger than the product only pads work (the smallest one is always kept).
            .filter(|t| {
                (t.bm <= 2 * bm.max(64) && t.bn <= 2 * bn.max(64)) || t.bm * t.bn == 64 * 64
            })
            .filter(|t| local_bytes(g, t, emulate) <= lmem)
            .map(|t| GemmCand {
                algo: Algo::Tc(t),
                splits: 1,
            })
            .collect()
    }

    /// Launches tile `t` for `g` on the buffers `[a, b, c]`: one launch of `gemm_tc` or `gemm_tc_pipe`, with
    /// the PTX instructions (`ptx`) or their emulation. The pipelined kernel needs a product it fits
    /// ([`pipe_fits`]); anything else is an error that says so.
    pub(crate) fn launch_tc(
        &self,
        g: &Gemm,
        t: &TcTile,
        [a, b, c]: [&Storage; 3],
        bias: Option<&Storage>,
        ptx: bool,
    ) -> Result<Event> {
        if t.stages > 0 && !pipe_fits(g, t) {
            return Err(Error::Invalid(format!(
                "the pipelined {} tile needs operands stored as {} with every row and batch start of A and B \
                 on 16 bytes",
                t.prec.name(),
                if t.prec == Precision::Fp16 {
                    "f16"
                } else {
                    "f32"
                }
            )));
        }
        let aligned = aligned(g);
        let key = [
            g.trans_a as usize,
            g.trans_b as usize,
            slot(t.prec),
            g.math.f16_io as usize,
            t.bm,
            t.bn,
            t.bk,
            t.wm,
            t.wn,
            t.stages,
            aligned as usize,
            ptx as usize,
        ];
        let k = self.kernel_by(quick_key(abi::FAMILY, t.kernel(), &key), || {
            defines(g, t, aligned, ptx)
        })?;
        let i = |v: usize| v as i32;
        let bias_mode = match (bias, g.bias) {
            (Some(_), BiasMode::Row) => 1,
            _ => 0,
        };
        let args = abi::GemmTc {
            M: i(g.m),
            N: i(g.n),
            K: i(g.k),
            A: a,
            offA: i(g.off_a),
            lda: i(g.lda),
            sA: i(g.s_a),
            B: b,
            offB: i(g.off_b),
            ldb: i(g.ldb),
            sB: i(g.s_b),
            C: c,
            offC: i(g.off_c),
            ldc: i(g.ldc),
            sC: i(g.s_c),
            bias: bias.unwrap_or(c),
            bias_mode,
            relu: g.relu as i32,
        };
        let global = [g.n.div_ceil(t.bn) * THREADS, g.m.div_ceil(t.bm), g.batch];
        self.run(&k, &args, &global, Some(&[THREADS, 1, 1]))
    }

    /// `c`, unless it is a pipelined tile whose probe fails here (a winner cached before the probe ran in this
    /// process): then the first register-staged tile, logged as the interim kernel of `key`.
    pub(crate) fn tc_runnable(
        &self,
        device: &Device,
        key: &TuneKey,
        g: &Gemm,
        c: GemmCand,
    ) -> GemmCand {
        let Algo::Tc(t) = c.algo else { return c };
        if t.stages == 0 || emulated().unwrap_or(true) || self.tc_pipe_status(t.prec).is_ok() {
            return c;
        }
        let staged = self
            .tc_candidates(g)
            .into_iter()
            .find(|s| matches!(s.algo, Algo::Tc(s) if s.stages == 0));
        match staged {
            Some(s) => {
                autotune::record_interim(device, key, &c, &s);
                s
            }
            None => c,
        }
    }

    /// Runs `op` with tile `t`.
    pub(crate) fn gemm_tc_with(&self, op: &GemmOp<'_>, t: TcTile) -> Result<Vec<Event>> {
        let (a, b, c, bias, g) = op.parts();
        let ptx = !emulated()?;
        if t.stages > 0 && ptx {
            self.tc_pipe_status(t.prec).map_err(|why| {
                Error::Invalid(format!(
                    "the pipelined {} tensor-core kernel is not used on this device: {why}",
                    t.prec.name()
                ))
            })?;
        }
        let bufs = [a.storage(), b.storage(), c.storage()];
        Ok(vec![self.launch_tc(
            g,
            &t,
            bufs,
            bias.map(|t| t.storage()),
            ptx,
        )?])
    }
}

#[cfg(test)]
#[path = "gemm_tc_tests.rs"]
mod tests;
