//! Reference attention and transformer ops in plain Rust (f64 accumulation, the full score row at once).

use crate::backend::cpu::{CpuDevice, access, host};
use crate::contract::attention::{AttnAlgo, AttnGrads, AttnShape, DecodeAlgo, DecodeShape};
use crate::contract::transformer::RopePlan;
use crate::contract::{AttentionKernels, TransformerKernels};
use crate::device::Device;
use crate::error::Result;
use crate::tensor::Tensor;

/// `scale·q·k` of one query and one key row, in f64.
fn score(q: &[f32], k: &[f32], scale: f32) -> f64 {
    q.iter()
        .zip(k)
        .map(|(a, b)| *a as f64 * *b as f64)
        .sum::<f64>()
        * scale as f64
}

/// The probabilities of query row `i` of head `bh` over its visible keys, and the row's log-sum-exp.
fn probs(p: &AttnShape, q: &[f32], k: &[f32], bh: usize, i: usize) -> (Vec<f64>, f64) {
    let (s, d) = (p.s, p.d);
    let qi = &q[(bh * s + i) * d..][..d];
    let end = if p.causal { i + 1 } else { s };
    let sc: Vec<f64> = (0..end)
        .map(|j| score(qi, &k[(bh * s + j) * d..][..d], p.scale))
        .collect();
    let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = sc.iter().map(|x| (x - m).exp()).sum();
    let lse = m + z.ln();
    (sc.iter().map(|x| (x - lse).exp()).collect(), lse)
}

impl AttentionKernels for CpuDevice {
    fn attention_forward(
        &self,
        _device: &Device,
        p: AttnShape,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &Tensor,
        lse: &Tensor,
        _algo: Option<AttnAlgo>,
    ) -> Result<()> {
        let (s, d) = (p.s, p.d);
        let mut l = vec![0f32; p.bh * s];
        host::map_f32(&[q, k, v], o, |ins, out| {
            let (q, k, v) = (ins[0], ins[1], ins[2]);
            for bh in 0..p.bh {
                for i in 0..s {
                    let (pr, ls) = probs(&p, q, k, bh, i);
                    l[bh * s + i] = ls as f32;
                    for dd in 0..d {
                        let a: f64 = pr
                            .iter()
                            .enumerate()
                            .map(|(j, pj)| pj * v[(bh * s + j) * d + dd] as f64)
                            .sum();
                        out[(bh * s + i) * d + dd] = a as f32;
                    }
                }
            }
        })?;
        host::map_f32(&[], lse, |_, out| out.copy_from_slice(&l))
    }

    fn attention_backward(
        &self,
        _device: &Device,
        p: AttnShape,
        t: &AttnGrads<'_>,
        _algo: Option<AttnAlgo>,
    ) -> Result<()> {
        let (s, d) = (p.s, p.d);
        let n = p.bh * s * d;
        let (mut dq, mut dk, mut dv) = (vec![0f64; n], vec![0f64; n], vec![0f64; n]);
        host::map_f32(&[t.q, t.k, t.v, t.g], t.dq, |ins, out| {
            let (q, k, v, g) = (ins[0], ins[1], ins[2], ins[3]);
            let row = |x: &[f32], bh: usize, i: usize| -> Vec<f64> {
                x[(bh * s + i) * d..][..d]
                    .iter()
                    .map(|&a| a as f64)
                    .collect()
            };
            for bh in 0..p.bh {
                for i in 0..s {
                    let (pr, _) = probs(&p, q, k, bh, i);
                    let gi = row(g, bh, i);
                    let dp: Vec<f64> = (0..pr.len())
                        .map(|j| row(v, bh, j).iter().zip(&gi).map(|(a, b)| a * b).sum())
                        .collect();
                    let delta: f64 = pr.iter().zip(&dp).map(|(a, b)| a * b).sum();
                    let qi = row(q, bh, i);
                    for (j, pj) in pr.iter().enumerate() {
                        let ds = pj * (dp[j] - delta) * p.scale as f64;
                        let kj = row(k, bh, j);
                        for dd in 0..d {
                            dq[(bh * s + i) * d + dd] += ds * kj[dd];
                            dk[(bh * s + j) * d + dd] += ds * qi[dd];
                            dv[(bh * s + j) * d + dd] += pj * gi[dd];
                        }
                    }
                }
            }
            for (o, x) in out.iter_mut().zip(&dq) {
                *o = *x as f32;
            }
        })?;
        host::map_f32(&[], t.dk, |_, out| {
            for (o, x) in out.iter_mut().zip(&dk) {
                *o = *x as f32;
            }
        })?;
        host::map_f32(&[], t.dv, |_, out| {
            for (o, x) in out.iter_mut().zip(&dv) {
                *o = *x as f32;
            }
        })
    }

    fn attention_decode(
        &self,
        _device: &Device,
        p: DecodeShape,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &Tensor,
        _algo: Option<DecodeAlgo>,
    ) -> Result<()> {
        let d = p.d;
        host::map_f32(&[q, k, v], o, |ins, out| {
            let (q, k, v) = (ins[0], ins[1], ins[2]);
            for bh in 0..p.bh {
                let qi = &q[bh * d..][..d];
                let sc: Vec<f64> = (0..p.len)
                    .map(|j| score(qi, &k[(bh * p.cap + j) * d..][..d], p.scale))
                    .collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for dd in 0..d {
                    let a: f64 = e
                        .iter()
                        .enumerate()
                        .map(|(j, w)| w * v[(bh * p.cap + j) * d + dd] as f64)
                        .sum();
                    out[bh * d + dd] = (a / z) as f32;
                }
            }
        })
    }
}

impl TransformerKernels for CpuDevice {
    fn rope(&self, p: RopePlan, x: &Tensor, pos: &Tensor, y: &Tensor) -> Result<()> {
        let pos: Vec<i32> = {
            let w = access::read(pos)?;
            bytemuck::cast_slice::<u32, i32>(&w[..])[..p.s].to_vec()
        };
        let sign = if p.inverse { -1.0 } else { 1.0 };
        host::map_f32(&[x], y, |ins, out| {
            let x = ins[0];
            for row in 0..p.rows {
                let at = pos[row % p.s] as f64;
                for t in 0..p.d / 2 {
                    let theta = (p.base as f64).powf(-2.0 * t as f64 / p.d as f64);
                    let (sn, c) = (at * theta).sin_cos();
                    let sn = sn * sign;
                    let o = row * p.d + 2 * t;
                    let (a, b) = (x[o] as f64, x[o + 1] as f64);
                    out[o] = (a * c - b * sn) as f32;
                    out[o + 1] = (a * sn + b * c) as f32;
                }
            }
        })
    }

    fn masked_fill(&self, x: &Tensor, mask: &Tensor, value: f32, y: &Tensor) -> Result<()> {
        host::map_f32(&[x, mask], y, |ins, out| {
            let (x, m) = (ins[0], ins[1]);
            for (i, o) in out.iter_mut().enumerate() {
                *o = if m[i % m.len()] != 0.0 { value } else { x[i] };
            }
        })
    }

    fn embedding_grad(&self, idx: &Tensor, g: &Tensor, e: usize, dw: &Tensor) -> Result<()> {
        let idx: Vec<i32> = {
            let w = access::read(idx)?;
            bytemuck::cast_slice::<u32, i32>(&w[..])[..idx.numel()].to_vec()
        };
        let gv = host::read_f32(g)?;
        let mut w = access::write(dw)?;
        let out = bytemuck::cast_slice_mut::<u32, f32>(&mut w[..]);
        for (n, &r) in idx.iter().enumerate() {
            for c in 0..e {
                out[r as usize * e + c] += gv[n * e + c];
            }
        }
        Ok(())
    }
}
