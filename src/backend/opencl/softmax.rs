//! OpenCL softmax and cross-entropy: the row algorithm chosen by measurement, and the `softmax` kernels.

use crate::autotune::{self, TuneKey, bucket};
use crate::backend::opencl::abi::softmax as abi;
use crate::backend::opencl::elementwise::{half_bits, half_defines};
use crate::backend::opencl::program::{Defines, kernel_source};
use crate::backend::opencl::{ClDevice, Event, events_ms};
use crate::contract::SoftmaxKernels;
use crate::contract::reduce::Ori;
use crate::contract::softmax::{CrossEntropy, SoftmaxAlgo, SoftmaxRows};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

impl ClDevice {
    fn softmax_algo(
        &self,
        device: &Device,
        v: Ori,
        forced: Option<SoftmaxAlgo>,
        bwd: bool,
        halves: usize,
        mut bench: impl FnMut(SoftmaxAlgo) -> Result<f64>,
    ) -> Result<SoftmaxAlgo> {
        if v.i > 1 {
            return Ok(SoftmaxAlgo::Serial);
        }
        let max_wg = self.info.max_work_group_size.max(1);
        // Rows of f16 (the forward's input) may be read eight halves at a time.
        let half_in = halves & 1 != 0;
        let reg_fits = |l: usize, k: usize, w: usize| {
            l.is_power_of_two()
                && l <= max_wg
                && (1..=16).contains(&k)
                && v.r.is_multiple_of(w)
                && v.r <= w * k * l
        };
        if let Some(a) = forced {
            let ok = match a {
                SoftmaxAlgo::Reg(l, k) => bwd || reg_fits(l, k, 4),
                SoftmaxAlgo::Reg8(l, k) => bwd || (half_in && reg_fits(l, k, 8)),
                SoftmaxAlgo::Wg(l) => l.is_power_of_two() && l <= max_wg,
                SoftmaxAlgo::Serial => true,
            };
            if !ok {
                return Err(Error::Invalid(format!(
                    "softmax: algorithm {a:?} does not fit rows of {} on this device (reg needs a power-of-two local size up to {max_wg}, 1 ≤ k ≤ 16, rows a multiple of 4 and at most 4·k·local; reg8 also an f16 input and rows a multiple of 8 and at most 8·k·local)",
                    v.r
                )));
            }
            return Ok(a);
        }
        let mut cands: Vec<SoftmaxAlgo> = Vec::new();
        if !bwd && v.r.is_multiple_of(4) {
            // Rows in registers: at most 16 loads per work-item, and no more work-items than loads in a row.
            // Loads of four elements; on GPUs, f16 rows also of eight halves (as many bytes as an f32 float4).
            let eight = half_in && v.r.is_multiple_of(8) && self.info.kind != "cpu";
            let widths: &[usize] = if eight { &[4, 8] } else { &[4] };
            for &w in widths {
                let loads = v.r / w;
                for l in [128usize, 256, 512, 1024] {
                    let k = loads.div_ceil(l);
                    if l <= max_wg && k <= 16 && (l == 128 || l <= loads) {
                        cands.push(if w == 4 {
                            SoftmaxAlgo::Reg(l, k)
                        } else {
                            SoftmaxAlgo::Reg8(l, k)
                        });
                    }
                }
            }
        }
        cands.extend(
            [64usize, 128, 256]
                .into_iter()
                .filter(|&l| l <= max_wg)
                .map(SoftmaxAlgo::Wg),
        );
        cands.push(SoftmaxAlgo::Serial);
        let default = if self.info.kind == "cpu" {
            cands.len() - 1
        } else if let Some(i) = cands
            .iter()
            .position(|a| matches!(a, SoftmaxAlgo::Reg(256, _)))
        {
            i
        } else {
            cands.len().saturating_sub(2)
        };
        // The key keeps R's multiple-of-4 bit: rows in registers are a candidate only then.
        let kernel = if bwd { "softmax_backward" } else { "softmax" };
        let mut fields = vec![
            ("o", bucket(v.o)),
            ("r", bucket(v.r)),
            ("r4", i64::from(v.r.is_multiple_of(4))),
        ];
        // Which buffers hold f16 (half_bits): an f16 call never takes an f32 winner; f32 keys are unchanged.
        if halves != 0 {
            fields.push(("f16", halves as i64));
        }
        let key =
            TuneKey::new(kernel, &fields).source(kernel_source("softmax").unwrap_or_default());
        autotune::tune(device, &key, &cands, default, |c| bench(*c))
    }

    fn run_softmax(&self, s: SoftmaxRows<'_>, algo: SoftmaxAlgo) -> Result<Event> {
        let (log, v, x, y, _) = s.parts();
        let d = half_defines(
            Defines::new().set("LOG", u8::from(log)),
            &[("IN_HALF", x), ("OUT_HALF", y)],
        );
        if v.i > 1 {
            let k = self.kernel(abi::FAMILY, &d, abi::SM_COL)?;
            let args = abi::SmCol {
                O: v.o as i32,
                R: v.r as i32,
                I: v.i as i32,
                x: x.storage(),
                y: y.storage(),
            };
            return self.launch_1d(&k, &args, v.o * v.i, Some(64));
        }
        match algo {
            SoftmaxAlgo::Reg(l, _) | SoftmaxAlgo::Reg8(l, _) | SoftmaxAlgo::Wg(l) => {
                let k = match algo {
                    SoftmaxAlgo::Reg(l, kk) => self.kernel(
                        abi::FAMILY,
                        &self.fold_defines(d.set("SM_K", kk), l),
                        abi::SM_ROW_REG,
                    )?,
                    SoftmaxAlgo::Reg8(l, kk) => self.kernel(
                        abi::FAMILY,
                        &self.fold_defines(d.set("SM_K", kk).set("SM_W", 8), l),
                        abi::SM_ROW_REG,
                    )?,
                    _ => self.kernel(abi::FAMILY, &d, abi::SM_ROW_WG)?,
                };
                // sm_row_reg has the parameters of sm_row_wg; the register kernel's folds
                // (GROUP_FOLD) use 32 floats beyond one per work-item.
                let args = abi::SmRowWg {
                    R: v.r as i32,
                    x: x.storage(),
                    y: y.storage(),
                    sc: (l + 32) * 4,
                };
                self.run(&k, &args, &[l * v.o], Some(&[l]))
            }
            SoftmaxAlgo::Serial => {
                let k = self.kernel(abi::FAMILY, &d, abi::SM_ROW_SERIAL)?;
                let args = abi::SmRowSerial {
                    O: v.o as i32,
                    R: v.r as i32,
                    x: x.storage(),
                    y: y.storage(),
                };
                self.run(&k, &args, &[v.o], None)
            }
        }
    }

    fn run_softmax_bwd(&self, s: SoftmaxRows<'_>, g: &Tensor, algo: SoftmaxAlgo) -> Result<Event> {
        let (log, v, y, gx, _) = s.parts();
        let d = half_defines(
            Defines::new().set("LOG", u8::from(log)),
            &[("IN_HALF", y), ("B_HALF", g), ("OUT_HALF", gx)],
        );
        if v.i > 1 {
            let k = self.kernel(abi::FAMILY, &d, abi::SMB_COL)?;
            let args = abi::SmbCol {
                O: v.o as i32,
                R: v.r as i32,
                I: v.i as i32,
                y: y.storage(),
                g: g.storage(),
                gx: gx.storage(),
            };
            return self.launch_1d(&k, &args, v.o * v.i, Some(64));
        }
        match algo {
            SoftmaxAlgo::Reg(l, _) | SoftmaxAlgo::Reg8(l, _) | SoftmaxAlgo::Wg(l) => {
                let k = self.kernel(abi::FAMILY, &d, abi::SMB_ROW_WG)?;
                let args = abi::SmbRowWg {
                    R: v.r as i32,
                    y: y.storage(),
                    g: g.storage(),
                    gx: gx.storage(),
                    sc: l * 4,
                };
                self.run(&k, &args, &[l * v.o], Some(&[l]))
            }
            SoftmaxAlgo::Serial => {
                let k = self.kernel(abi::FAMILY, &d, abi::SMB_ROW_SERIAL)?;
                let args = abi::SmbRowSerial {
                    O: v.o as i32,
                    R: v.r as i32,
                    y: y.storage(),
                    g: g.storage(),
                    gx: gx.storage(),
                };
                self.run(&k, &args, &[v.o], None)
            }
        }
    }
}

impl SoftmaxKernels for ClDevice {
    fn softmax(&self, device: &Device, s: SoftmaxRows<'_>) -> Result<()> {
        let halves = half_bits(&[s.src, s.dst]);
        let a = self.softmax_algo(device, s.v, s.algo, false, halves, |c| {
            events_ms(&[self.run_softmax(s, c)?])
        })?;
        self.run_softmax(s, a)?;
        Ok(())
    }

    fn softmax_backward(&self, device: &Device, s: SoftmaxRows<'_>, g: &Tensor) -> Result<()> {
        let halves = half_bits(&[s.src, g, s.dst]);
        let a = self.softmax_algo(device, s.v, s.algo, true, halves, |c| {
            events_ms(&[self.run_softmax_bwd(s, g, c)?])
        })?;
        self.run_softmax_bwd(s, g, a)?;
        Ok(())
    }

    fn cross_entropy(&self, ce: CrossEntropy<'_>) -> Result<()> {
        let (logits, labels, ignore, stats) = ce.parts();
        let (n, c) = (logits.shape()[0], logits.shape()[1]);
        let dev = logits.device();
        let loss = Tensor::empty(dev, &[n.max(1)], DType::F32)?;
        let valid = Tensor::empty(dev, &[n.max(1)], DType::I32)?;
        let d = Defines::new();
        if n > 0 {
            let k = self.kernel(abi::FAMILY, &d, abi::CE_ROWS)?;
            let args = abi::CeRows {
                N: n as i32,
                C: c as i32,
                ignore,
                x: logits.storage(),
                labels: labels.storage(),
                loss: loss.storage(),
                valid: valid.storage(),
            };
            self.launch_1d(&k, &args, n, Some(64))?;
        }
        // The largest power of two up to 256 that the device allows in a group.
        let max = self.info.max_work_group_size.clamp(1, 256);
        let l = 1usize << (usize::BITS - 1 - max.leading_zeros());
        let k = self.kernel(abi::FAMILY, &d, abi::CE_FINISH)?;
        let args = abi::CeFinish {
            N: n as i32,
            loss: loss.storage(),
            valid: valid.storage(),
            stats: stats.storage(),
            sl: l * 4,
            sc: l * 4,
            sb: l * 4,
        };
        self.run(&k, &args, &[l], Some(&[l]))?;
        Ok(())
    }

    fn cross_entropy_backward(&self, ce: CrossEntropy<'_>, g: &Tensor, gx: &Tensor) -> Result<()> {
        let (logits, labels, ignore, stats) = ce.parts();
        let (n, c) = (logits.shape()[0], logits.shape()[1]);
        let k = self.kernel(abi::FAMILY, &Defines::new(), abi::CE_BWD)?;
        let args = abi::CeBwd {
            N: n as i32,
            C: c as i32,
            ignore,
            x: logits.storage(),
            labels: labels.storage(),
            stats: stats.storage(),
            gout: g.storage(),
            gx: gx.storage(),
        };
        self.launch_1d(&k, &args, n, Some(64))?;
        Ok(())
    }
}
