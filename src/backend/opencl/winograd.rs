//! OpenCL Winograd convolution: F(2×2, 3×3) and F(4×4, 3×3) transforms around batched products, forward and
//! backward, with the measured tile size and grad_w layout.

use crate::Device;
use crate::autotune::{self, bucket, shape_key};
use crate::backend::opencl::abi::{conv as conv_abi, winograd as abi};
use crate::backend::opencl::program::Defines;
use crate::backend::opencl::{ClDevice, Event, events_ms};
use crate::contract::conv::{ConvBwd, ConvFwd, ConvGeom};
use crate::contract::gemm::{Gemm, GemmOp, GemmTune};
use crate::error::Result;
use crate::tensor::{DType, Tensor};

use super::conv::algo_key;

/// The Winograd output tile sizes, chosen by measurement: F(2×2, 3×3) and F(4×4, 3×3).
const WINO_TILES: [usize; 2] = [2, 4];

/// The tiling of one Winograd F(wm×wm, 3×3) pass: α² = (wm + 2)² transform elements, `th`×`tw` output tiles
/// per image, `nt` = N·th·tw tiles in all.
struct WinoTiles {
    wm: usize,
    al2: usize,
    th: usize,
    tw: usize,
    nt: usize,
}

impl WinoTiles {
    fn new(g: &ConvGeom, wm: usize) -> Self {
        let (th, tw) = (g.oh.div_ceil(wm), g.ow.div_ceil(wm));
        WinoTiles {
            wm,
            al2: (wm + 2) * (wm + 2),
            th,
            tw,
            nt: g.n * th * tw,
        }
    }

    /// The leading arguments of the kernels that walk output tiles (`wino_output`, `wino_grad_out`): N, F, OH,
    /// OW, TH, TW.
    fn out_dims(&self, g: &ConvGeom) -> [i32; 6] {
        [g.n, g.f, g.oh, g.ow, self.th, self.tw].map(|v| v as i32)
    }

    /// The tuning key of the pass's batched products.
    fn gemm_key(&self, g: &ConvGeom) -> String {
        shape_key(&[
            g.f as i64,
            g.c as i64,
            bucket(g.n),
            bucket(self.th * self.tw),
            self.wm as i64,
        ])
    }
}

impl ClDevice {
    /// The Winograd transform kernels for output tiles of `wm`×`wm` (2 or 4).
    fn wino_kernel(
        &self,
        wm: usize,
        name: &str,
    ) -> Result<std::sync::Arc<crate::backend::opencl::program::ClKernel>> {
        self.kernel(abi::FAMILY, &Defines::new().set("WM", wm), name)
    }

    /// The input transform writing V transposed: the one kernel built with `VT` (every other build of the
    /// family leaves it at its default of 0, so the untransposed transform shares their program).
    fn wino_input_vt_kernel(
        &self,
        wm: usize,
    ) -> Result<std::sync::Arc<crate::backend::opencl::program::ClKernel>> {
        self.kernel(
            abi::FAMILY,
            &Defines::new().set("WM", wm).set("VT", 1),
            abi::WINO_INPUT,
        )
    }

    /// The Winograd input transform of `x` (the convolution's input) for the tiling `tl`: V (α²×C×N·T), or
    /// with `vt` each element's matrix transposed (α²×N·T×C).
    fn wino_input(
        &self,
        device: &Device,
        tl: &WinoTiles,
        x: &Tensor,
        g: &ConvGeom,
        vt: bool,
    ) -> Result<(Tensor, Event)> {
        let v = Tensor::empty(device, &[tl.al2, g.c, tl.nt], DType::F32)?;
        let k = if vt {
            self.wino_input_vt_kernel(tl.wm)?
        } else {
            self.wino_kernel(tl.wm, abi::WINO_INPUT)?
        };
        let args = abi::WinoInput {
            N: g.n as i32,
            C: g.c as i32,
            H: g.h as i32,
            W: g.w as i32,
            PH: g.ph as i32,
            PW: g.pw as i32,
            TH: tl.th as i32,
            TW: tl.tw as i32,
            x: x.storage(),
            V: v.storage(),
        };
        let grid = if vt { [g.c, tl.nt] } else { [tl.nt, g.c] };
        let ev = self.run(&k, &args, &grid, None)?;
        Ok((v, ev))
    }

    /// Winograd F(wm×wm, 3×3) forward: filter and input transforms, one batched product per transform
    /// element (`M[ab] = U[ab] · V[ab]`), output transform with bias and ReLU.
    #[allow(clippy::too_many_arguments)]
    fn fwd_winograd_tile(
        &self,
        device: &Device,
        wm: usize,
        op: &ConvFwd<'_>,
    ) -> Result<Vec<Event>> {
        let (x, w, bias, out, g, relu) = op.parts();
        let tl = WinoTiles::new(g, wm);
        let (al2, nt) = (tl.al2, tl.nt);
        let u = Tensor::empty(device, &[al2, g.f, g.c], DType::F32)?;
        let m = Tensor::empty(device, &[al2, g.f, nt], DType::F32)?;
        let k = self.wino_kernel(wm, abi::WINO_FILTER)?;
        let mut ev = vec![self.run(
            &k,
            &abi::WinoFilter {
                F: g.f as i32,
                C: g.c as i32,
                w: w.storage(),
                U: u.storage(),
            },
            &[g.f * g.c],
            None,
        )?];
        let (v, e) = self.wino_input(device, &tl, x, g, false)?;
        ev.push(e);
        let gm = Gemm {
            tune: GemmTune::Named("wino_batched_gemm", tl.gemm_key(g)),
            ..Gemm::dense(g.f, nt, g.c, al2, false, false, false)
        };
        ev.extend(self.run_gemm(device, &GemmOp::new(&u, &v, &m, None, &gm))?);
        let k = self.wino_kernel(wm, abi::WINO_OUTPUT)?;
        let [n, f, oh, ow, th, tw] = tl.out_dims(g);
        let args = abi::WinoOutput {
            N: n,
            F: f,
            OH: oh,
            OW: ow,
            TH: th,
            TW: tw,
            Mt: m.storage(),
            bias: bias.unwrap_or(w).storage(),
            has_bias: bias.is_some() as i32,
            relu: relu as i32,
            out: out.storage(),
        };
        ev.push(self.run(&k, &args, &[nt, g.f], None)?);
        Ok(ev)
    }

    /// Winograd forward with the output tile size (2×2 or 4×4) chosen by measurement (`wino_tile`).
    pub(super) fn fwd_winograd(&self, device: &Device, op: &ConvFwd<'_>) -> Result<Vec<Event>> {
        let (_, _, bias, _, g, relu) = op.parts();
        let key = algo_key(
            "wino_tile",
            g,
            &[("bias", bias.is_some() as i64), ("relu", relu as i64)],
        );
        // First choice before measurement: 4×4 output tiles, the winner of every recorded shape.
        let wm = autotune::tune(device, &key, &WINO_TILES, 1, |&wm| {
            events_ms(&self.fwd_winograd_tile(device, wm, op)?)
        })?;
        self.fwd_winograd_tile(device, wm, op)
    }

    /// grad_w of a Winograd-eligible convolution in the Winograd domain (F(3×3, wm×wm)): the input transform
    /// of `x`, the adjoint output transform of grad_out, one batched product per transform element
    /// (`dU[ab] = D[ab] · V[ab]ᵀ`, reduced over every tile of the batch, split-K when long) and the adjoint
    /// filter transform. With `vt` the input transform writes each V[ab] transposed, so the product reads an
    /// untransposed B (its GEMM decisions are then keyed with a trailing 1).
    #[allow(clippy::too_many_arguments)]
    fn wino_grad_w_tile(
        &self,
        device: &Device,
        wm: usize,
        vt: bool,
        x: &Tensor,
        go: &Tensor,
        gw: &Tensor,
        g: &ConvGeom,
    ) -> Result<Vec<Event>> {
        let tl = WinoTiles::new(g, wm);
        let (al2, nt) = (tl.al2, tl.nt);
        let dm = Tensor::empty(device, &[al2, g.f, nt], DType::F32)?;
        let mw = Tensor::empty(device, &[al2, g.f, g.c], DType::F32)?;
        let (v, e) = self.wino_input(device, &tl, x, g, vt)?;
        let mut ev = vec![e];
        let k = self.wino_kernel(wm, abi::WINO_GRAD_OUT)?;
        let [n, f, oh, ow, th, tw] = tl.out_dims(g);
        let args = abi::WinoGradOut {
            N: n,
            F: f,
            OH: oh,
            OW: ow,
            TH: th,
            TW: tw,
            go: go.storage(),
            D: dm.storage(),
        };
        ev.push(self.run(&k, &args, &[nt, g.f], None)?);
        let mut tune_key = tl.gemm_key(g);
        if vt {
            tune_key.insert_str(tune_key.len() - 1, ", 1");
        }
        let gm = Gemm {
            tune: GemmTune::Named("wino_grad_w_gemm", tune_key),
            ..Gemm::dense(g.f, g.c, nt, al2, false, !vt, false)
        };
        ev.extend(self.run_gemm(device, &GemmOp::new(&dm, &v, &mw, None, &gm))?);
        let k = self.wino_kernel(wm, abi::WINO_GRAD_FILTER)?;
        let args = abi::WinoGradFilter {
            F: g.f as i32,
            C: g.c as i32,
            Mw: mw.storage(),
            gw: gw.storage(),
        };
        ev.push(self.run(&k, &args, &[g.f * g.c], None)?);
        Ok(ev)
    }

    /// Winograd grad_w, when `op` asks for it, with the tile size chosen by measurement (`wino_grad_w_tile`).
    fn wino_grad_w(&self, device: &Device, op: &ConvBwd<'_>, ev: &mut Vec<Event>) -> Result<()> {
        let (x, _, go, gr, g) = op.parts();
        let Some(gw) = gr.gw else {
            return Ok(());
        };
        let key = algo_key("wino_grad_w_tile", g, &[]);
        let wm = autotune::tune(device, &key, &WINO_TILES, 1, |&wm| {
            let vt = self.wino_grad_w_vt(device, wm, x, go, gw, g)?;
            events_ms(&self.wino_grad_w_tile(device, wm, vt, x, go, gw, g)?)
        })?;
        let vt = self.wino_grad_w_vt(device, wm, x, go, gw, g)?;
        ev.extend(self.wino_grad_w_tile(device, wm, vt, x, go, gw, g)?);
        Ok(())
    }

    /// Whether grad_w's input transform writes V transposed (`wino_grad_w_layout`: `"ct"` keeps V[ab][c][nt]
    /// and multiplies by its transpose, `"tc"` writes V[ab][nt][c]), measured over the whole grad_w pass for
    /// the tile size `wm`.
    fn wino_grad_w_vt(
        &self,
        device: &Device,
        wm: usize,
        x: &Tensor,
        go: &Tensor,
        gw: &Tensor,
        g: &ConvGeom,
    ) -> Result<bool> {
        let key = algo_key("wino_grad_w_layout", g, &[("wm", wm as i64)]);
        // First choice before measurement: `ct` won on the H200, `tc` on PoCL.
        let default = usize::from(self.info.kind == "cpu");
        let layout = autotune::tune(device, &key, &["ct", "tc"], default, |l| {
            events_ms(&self.wino_grad_w_tile(device, wm, *l == "tc", x, go, gw, g)?)
        })?;
        Ok(layout == "tc")
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn bwd_winograd(&self, device: &Device, op: &ConvBwd<'_>) -> Result<Vec<Event>> {
        let (_, w, go, gr, g) = op.parts();
        let mut ev = Vec::new();
        if let Some(gx) = gr.gx {
            let wr = Tensor::empty(device, &[g.c, g.f, g.kh, g.kw], DType::F32)?;
            let k = self.kernel(
                conv_abi::FAMILY,
                &Defines::new(),
                conv_abi::CONV_FLIP_WEIGHTS,
            )?;
            let args = conv_abi::ConvFlipWeights {
                F: g.f as i32,
                C: g.c as i32,
                KH: g.kh as i32,
                KW: g.kw as i32,
                w: w.storage(),
                wr: wr.storage(),
            };
            ev.push(self.run(&k, &args, &[g.f * g.c], None)?);
            let flipped = ConvFwd {
                x: go,
                w: &wr,
                bias: None,
                out: gx,
                g: &g.grad_x_as_conv(),
                relu: false,
            };
            ev.extend(self.fwd_winograd(device, &flipped)?);
        }
        self.wino_grad_w(device, op, &mut ev)?;
        Ok(ev)
    }
}
