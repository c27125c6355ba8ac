//! Playground bindings of the attention and transformer ops: `flash_attention` (differentiable, options
//! `causal` and `scale`), `attention_decode`, `rope`, `rms_norm`, `masked_fill`, `causal_mask` and
//! `embedding` (differentiable in the table).

use rhai::{Dynamic, Engine, INT, Map};

use super::bindings::{R, float_arg, precharge, track, track_var};
use super::{Shared, engine_err, script_err};
use crate::autograd::{Var, attention as ag};
use crate::ops;

fn attn_opts(o: &Map) -> R<(bool, Option<f32>)> {
    if let Some(k) = o
        .keys()
        .find(|k| !["causal", "scale"].contains(&k.as_str()))
    {
        return Err(script_err(
            "invalid",
            format!("flash_attention: unknown option `{k}`; options are causal, scale"),
        ));
    }
    let causal = match o.get("causal") {
        None => false,
        Some(v) => v.as_bool().map_err(|_| {
            script_err(
                "invalid",
                format!("flash_attention: `causal` is true or false, got {v}"),
            )
        })?,
    };
    let scale = match o.get("scale") {
        None => None,
        Some(v) => Some(float_arg(v, "flash_attention: `scale`")? as f32),
    };
    Ok((causal, scale))
}

fn count(n: INT, what: &str) -> R<usize> {
    usize::try_from(n).map_err(|_| {
        script_err(
            "invalid",
            format!("{what} is a non-negative integer, got {n}"),
        )
    })
}

/// Registers the attention and transformer op functions.
pub(crate) fn register(engine: &mut Engine, ctx: &Shared) {
    let c = ctx.clone();
    let attn = move |q: Var, k: Var, v: Var, o: Map| -> R<Var> {
        let (causal, scale) = attn_opts(&o)?;
        precharge(&c, Some(q.value().numel()), "`flash_attention`")?;
        track_var(
            &c,
            ag::flash_attention(&q, &k, &v, causal, scale).map_err(engine_err)?,
        )
    };
    let a2 = attn.clone();
    engine.register_fn("flash_attention", move |q: Var, k: Var, v: Var| {
        a2(q, k, v, Map::new())
    });
    engine.register_fn("flash_attention", attn);
    let c = ctx.clone();
    engine.register_fn(
        "attention_decode",
        move |q: Var, k: Var, v: Var, len: INT| -> R<Var> {
            let len = count(len, "attention_decode: len")?;
            precharge(&c, Some(q.value().numel()), "`attention_decode`")?;
            track(
                &c,
                ops::attention_decode(q.value(), k.value(), v.value(), len, None)
                    .map_err(engine_err)?,
            )
        },
    );
    let c = ctx.clone();
    let rope = move |x: Var, base: Dynamic| -> R<Var> {
        let base = float_arg(&base, "rope: base")? as f32;
        precharge(&c, Some(x.value().numel()), "`rope`")?;
        track_var(&c, ag::rope(&x, None, base).map_err(engine_err)?)
    };
    let r2 = rope.clone();
    engine.register_fn("rope", move |x: Var| r2(x, Dynamic::from(10000.0_f64)));
    engine.register_fn("rope", rope);
    let c = ctx.clone();
    let rms = move |x: Var, g: Var, eps: Dynamic| -> R<Var> {
        let eps = float_arg(&eps, "rms_norm: eps")? as f32;
        precharge(&c, Some(x.value().numel()), "`rms_norm`")?;
        track_var(&c, ag::rms_norm(&x, &g, eps).map_err(engine_err)?)
    };
    let r2 = rms.clone();
    engine.register_fn("rms_norm", move |x: Var, g: Var| {
        r2(x, g, Dynamic::from(1e-6_f64))
    });
    engine.register_fn("rms_norm", rms);
    let c = ctx.clone();
    engine.register_fn(
        "masked_fill",
        move |x: Var, mask: Var, value: Dynamic| -> R<Var> {
            let value = float_arg(&value, "masked_fill: value")? as f32;
            precharge(&c, Some(x.value().numel()), "`masked_fill`")?;
            track_var(
                &c,
                ag::masked_fill(&x, mask.value(), value).map_err(engine_err)?,
            )
        },
    );
    let c = ctx.clone();
    engine.register_fn("causal_mask", move |s: INT| -> R<Var> {
        let s = count(s, "causal_mask: the length")?;
        precharge(&c, s.checked_mul(s), "`causal_mask`")?;
        let d = c.borrow().device.clone();
        track(&c, ops::causal_mask(&d, s).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("embedding", move |w: Var, idx: Var| -> R<Var> {
        let e = w.value().shape().last().copied().unwrap_or(0);
        precharge(&c, idx.value().numel().checked_mul(e), "`embedding`")?;
        track_var(&c, ag::embedding(&w, idx.value()).map_err(engine_err)?)
    });
}
