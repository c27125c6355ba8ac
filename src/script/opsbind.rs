//! Playground bindings of the op set: linear algebra, convolutions, activations, reductions, softmax and
//! losses, pooling and shape ops. Options come as a map (`conv2d(x, w, #{stride: 2, padding: 1})`).
//! Differentiable ops record gradients for `param` inputs; the others are forward-only and say so.

use rhai::{Array, Dynamic, Engine, INT, Map};

use super::bindings::{R, float_arg, precharge, shape_arg, track, track_var};
use super::outsize;
use super::{Shared, engine_err, script_err};
use crate::autograd::{Var, ops as ag};
use crate::ops::{self, Conv2dOptions, ConvAlgo, ConvTranspose2dOptions, Pool2d, UnaryOp};

fn opt_usize(m: &Map, key: &str, default: usize) -> R<usize> {
    match m.get(key) {
        None => Ok(default),
        Some(v) => v
            .as_int()
            .ok()
            .filter(|&i| i >= 0)
            .map(|i| i as usize)
            .ok_or_else(|| {
                script_err(
                    "invalid",
                    format!("option `{key}` must be a non-negative integer, got {v}"),
                )
            }),
    }
}

fn known(m: &Map, allowed: &[&str], op: &str) -> R<()> {
    match m.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(script_err(
            "invalid",
            format!(
                "{op}: unknown option `{k}`; options are {}",
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

fn conv_opts(m: &Map) -> R<(Conv2dOptions, Option<Var>)> {
    known(
        m,
        &[
            "stride", "padding", "dilation", "groups", "algo", "relu", "bias",
        ],
        "conv2d",
    )?;
    let algo = match m.get("algo").map(|a| a.to_string()) {
        None => None,
        Some(a) => Some(match a.as_str() {
            "direct" => ConvAlgo::Direct,
            "im2col" => ConvAlgo::Im2col,
            "winograd" => ConvAlgo::Winograd,
            "pointwise" => ConvAlgo::Pointwise,
            other => {
                return Err(script_err(
                    "invalid",
                    format!("conv2d: algo `{other}` is not direct, im2col, winograd or pointwise"),
                ));
            }
        }),
    };
    let bias = m
        .get("bias")
        .and_then(|b| b.read_lock::<Var>().map(|v| v.clone()));
    let o = Conv2dOptions {
        stride: [opt_usize(m, "stride", 1)?; 2],
        padding: [opt_usize(m, "padding", 0)?; 2],
        dilation: [opt_usize(m, "dilation", 1)?; 2],
        groups: opt_usize(m, "groups", 1)?,
        algo,
        fuse_relu: m
            .get("relu")
            .and_then(|v| v.as_bool().ok())
            .unwrap_or(false),
    };
    Ok((o, bias))
}

fn axes_arg(a: &Array) -> R<Vec<isize>> {
    a.iter()
        .map(|d| {
            d.as_int()
                .map(|i| i as isize)
                .map_err(|_| script_err("invalid", format!("an axis is an integer, got {d}")))
        })
        .collect()
}

fn forward_only(x: &Var, op: &str) -> R<()> {
    if x.requires_grad() {
        return Err(script_err(
            "unsupported",
            format!("{op} has no gradient; apply it to values without one"),
        ));
    }
    Ok(())
}

/// Charges an op whose output has as many elements as `x`, before it runs.
fn same(c: &Shared, x: &Var, op: &str) -> R<()> {
    precharge(c, Some(x.value().numel()), &format!("`{op}`"))
}

macro_rules! unary_fn {
    ($engine:expr, $ctx:expr, $name:literal, $op:expr) => {{
        let c = $ctx.clone();
        $engine.register_fn($name, move |x: Var| -> R<Var> {
            same(&c, &x, $name)?;
            track_var(&c, ag::unary($op, &x).map_err(engine_err)?)
        });
    }};
}

/// Registers the op functions.
pub(crate) fn register(engine: &mut Engine, ctx: &Shared) {
    let c = ctx.clone();
    engine.register_fn("matmul", move |a: Var, b: Var| -> R<Var> {
        // [.., m, k] @ [k, n] makes [.., m, n]: the rows of `a` times the columns of `b`.
        let (sa, sb) = (a.value().shape(), b.value().shape());
        if let (Some(&k), Some(&n)) = (sa.last(), sb.last())
            && k > 0
        {
            precharge(&c, (a.value().numel() / k).checked_mul(n), "`matmul`")?;
        }
        track_var(&c, ag::matmul(&a, &b).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("matmul", move |a: Var, b: Var, precision: &str| -> R<Var> {
        // The forward product at `precision` (fp32, tf32 or fp16); a backward pass runs at the default.
        let p: crate::Precision = precision.parse().map_err(engine_err)?;
        let (sa, sb) = (a.value().shape(), b.value().shape());
        if let (Some(&k), Some(&n)) = (sa.last(), sb.last())
            && k > 0
        {
            precharge(&c, (a.value().numel() / k).checked_mul(n), "`matmul`")?;
        }
        let y = crate::precision::with(p, || ag::matmul(&a, &b)).map_err(engine_err)?;
        track_var(&c, y)
    });
    let c = ctx.clone();
    engine.register_fn("bmm", move |a: Var, b: Var| -> R<Var> {
        forward_only(&a, "bmm")?;
        forward_only(&b, "bmm")?;
        precharge(
            &c,
            outsize::bmm(a.value().shape(), b.value().shape()),
            "`bmm`",
        )?;
        track(
            &c,
            ops::bmm(a.value(), b.value(), false, false).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("conv2d", move |x: Var, w: Var| -> R<Var> {
        precharge(
            &c,
            outsize::conv2d(x.value().shape(), w.value().shape(), 1, 0, 1),
            "`conv2d`",
        )?;
        track_var(
            &c,
            ag::conv2d(&x, &w, None, &Conv2dOptions::default()).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("conv2d", move |x: Var, w: Var, o: Map| -> R<Var> {
        let (opts, bias) = conv_opts(&o)?;
        let n = outsize::conv2d(
            x.value().shape(),
            w.value().shape(),
            opts.stride[0],
            opts.padding[0],
            opts.dilation[0],
        );
        precharge(&c, n, "`conv2d`")?;
        track_var(
            &c,
            ag::conv2d(&x, &w, bias.as_ref(), &opts).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn(
        "depthwise_conv2d",
        move |x: Var, w: Var, o: Map| -> R<Var> {
            known(
                &o,
                &["stride", "padding", "bias", "algo"],
                "depthwise_conv2d",
            )?;
            let bias = o
                .get("bias")
                .and_then(|b| b.read_lock::<Var>().map(|v| v.clone()));
            let n = outsize::depthwise(
                x.value().shape(),
                w.value().shape(),
                opt_usize(&o, "stride", 1)?,
                opt_usize(&o, "padding", 0)?,
            );
            precharge(&c, n, "`depthwise_conv2d`")?;
            if let Some(a) = o.get("algo") {
                // A forced algorithm runs the forward op alone (no gradient), as the Rust API's `_algo` form does.
                let algo = match a.to_string().as_str() {
                    "local" => ops::DwAlgo::Local,
                    "rows" => ops::DwAlgo::Rows,
                    "tile" => ops::DwAlgo::Tile,
                    "naive" => ops::DwAlgo::Naive,
                    other => {
                        return Err(script_err(
                            "invalid",
                            format!(
                                "depthwise_conv2d: algo `{other}` is not local, rows, tile or naive"
                            ),
                        ));
                    }
                };
                forward_only(&x, "depthwise_conv2d with a forced algo")?;
                forward_only(&w, "depthwise_conv2d with a forced algo")?;
                let y = ops::depthwise_conv2d_algo(
                    x.value(),
                    w.value(),
                    bias.as_ref().map(Var::value),
                    opt_usize(&o, "stride", 1)?,
                    opt_usize(&o, "padding", 0)?,
                    Some(algo),
                );
                return track(&c, y.map_err(engine_err)?);
            }
            let y = ag::depthwise_conv2d(
                &x,
                &w,
                bias.as_ref(),
                opt_usize(&o, "stride", 1)?,
                opt_usize(&o, "padding", 0)?,
            );
            track_var(&c, y.map_err(engine_err)?)
        },
    );
    let c = ctx.clone();
    engine.register_fn(
        "conv_transpose2d",
        move |x: Var, w: Var, o: Map| -> R<Var> {
            known(
                &o,
                &["stride", "padding", "output_padding", "bias"],
                "conv_transpose2d",
            )?;
            let bias = o
                .get("bias")
                .and_then(|b| b.read_lock::<Var>().map(|v| v.clone()));
            let opts = ConvTranspose2dOptions {
                conv: Conv2dOptions {
                    stride: [opt_usize(&o, "stride", 1)?; 2],
                    padding: [opt_usize(&o, "padding", 0)?; 2],
                    ..Conv2dOptions::default()
                },
                output_padding: [opt_usize(&o, "output_padding", 0)?; 2],
            };
            let n = outsize::conv_transpose2d(x.value().shape(), w.value().shape(), &opts);
            precharge(&c, n, "`conv_transpose2d`")?;
            track_var(
                &c,
                ag::conv_transpose2d(&x, &w, bias.as_ref(), &opts).map_err(engine_err)?,
            )
        },
    );

    unary_fn!(engine, ctx, "relu", UnaryOp::Relu);
    unary_fn!(engine, ctx, "sigmoid", UnaryOp::Sigmoid);
    unary_fn!(engine, ctx, "tanh", UnaryOp::Tanh);
    unary_fn!(engine, ctx, "gelu", UnaryOp::GeluTanh);
    unary_fn!(engine, ctx, "gelu_erf", UnaryOp::GeluErf);
    unary_fn!(engine, ctx, "silu", UnaryOp::Silu);
    unary_fn!(engine, ctx, "softplus", UnaryOp::Softplus);
    unary_fn!(engine, ctx, "hard_sigmoid", UnaryOp::HardSigmoid);
    unary_fn!(engine, ctx, "hard_swish", UnaryOp::HardSwish);
    unary_fn!(engine, ctx, "exp", UnaryOp::Exp);
    unary_fn!(engine, ctx, "log", UnaryOp::Log);
    unary_fn!(engine, ctx, "sqrt", UnaryOp::Sqrt);
    unary_fn!(engine, ctx, "abs", UnaryOp::Abs);
    unary_fn!(engine, ctx, "neg", UnaryOp::Neg);
    unary_fn!(engine, ctx, "square", UnaryOp::Square);
    let c = ctx.clone();
    engine.register_fn("leaky_relu", move |x: Var, slope: Dynamic| -> R<Var> {
        let slope = float_arg(&slope, "leaky_relu's slope")?;
        same(&c, &x, "leaky_relu")?;
        track_var(
            &c,
            ag::unary(UnaryOp::LeakyRelu(slope as f32), &x).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("elu", move |x: Var, alpha: Dynamic| -> R<Var> {
        let alpha = float_arg(&alpha, "elu's alpha")?;
        same(&c, &x, "elu")?;
        track_var(
            &c,
            ag::unary(UnaryOp::Elu(alpha as f32), &x).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("clamp", move |x: Var, lo: Dynamic, hi: Dynamic| -> R<Var> {
        let (lo, hi) = (float_arg(&lo, "clamp's lo")?, float_arg(&hi, "clamp's hi")?);
        same(&c, &x, "clamp")?;
        track_var(
            &c,
            ag::unary(UnaryOp::Clamp(lo as f32, hi as f32), &x).map_err(engine_err)?,
        )
    });

    let c = ctx.clone();
    engine.register_fn("sum_all", move |x: Var| -> R<Var> {
        track_var(&c, ag::sum_all(&x).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("mean_all", move |x: Var| -> R<Var> {
        track_var(&c, ag::mean_all(&x).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("sum", move |x: Var, axes: Array| -> R<Var> {
        track_var(
            &c,
            ag::sum(&x, Some(&axes_arg(&axes)?), false).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn(
        "sum",
        move |x: Var, axes: Array, keepdims: bool| -> R<Var> {
            track_var(
                &c,
                ag::sum(&x, Some(&axes_arg(&axes)?), keepdims).map_err(engine_err)?,
            )
        },
    );
    for (name, op) in [
        ("mean", ops::ReduceOp::Mean),
        ("max", ops::ReduceOp::Max),
        ("min", ops::ReduceOp::Min),
        ("prod", ops::ReduceOp::Prod),
    ] {
        let c = ctx.clone();
        engine.register_fn(name, move |x: Var, axes: Array| -> R<Var> {
            forward_only(&x, name)?;
            track(
                &c,
                ops::reduce(op, x.value(), Some(&axes_arg(&axes)?), false).map_err(engine_err)?,
            )
        });
    }
    let c = ctx.clone();
    engine.register_fn("reduce_to_shape", move |x: Var, shape: Array| -> R<Var> {
        forward_only(&x, "reduce_to_shape")?;
        track(
            &c,
            ops::reduce_to_shape(x.value(), &shape_arg(&shape)?).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("layer_norm", move |x: Var, dims: INT| -> R<Var> {
        forward_only(&x, "layer_norm")?;
        same(&c, &x, "layer_norm")?;
        let n = usize::try_from(dims).map_err(|_| {
            script_err(
                "invalid",
                format!("layer_norm: dims is a non-negative integer, got {dims}"),
            )
        })?;
        track(
            &c,
            ops::layer_norm(x.value(), n, None, None, 1e-5)
                .map_err(engine_err)?
                .y,
        )
    });
    let c = ctx.clone();
    engine.register_fn("argmax", move |x: Var, axis: INT| -> R<Var> {
        track(
            &c,
            ops::argmax(x.value(), axis as isize, false).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("softmax", move |x: Var, axis: INT| -> R<Var> {
        same(&c, &x, "softmax")?;
        track_var(&c, ag::softmax(&x, axis as isize).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("log_softmax", move |x: Var, axis: INT| -> R<Var> {
        same(&c, &x, "log_softmax")?;
        track_var(&c, ag::log_softmax(&x, axis as isize).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("cross_entropy", move |logits: Var, labels: Var| -> R<Var> {
        track_var(
            &c,
            ag::cross_entropy(&logits, labels.value(), -100).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("mse_loss", move |p: Var, t: Var| -> R<Var> {
        track_var(&c, ag::mse_loss(&p, &t).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("l1_loss", move |p: Var, t: Var| -> R<Var> {
        track_var(&c, ag::l1_loss(&p, &t).map_err(engine_err)?)
    });

    let pool = |c: &Shared, x: &Var, o: &Map, op: &str| -> R<Pool2d> {
        known(o, &["kernel", "stride", "padding"], op)?;
        let k = opt_usize(o, "kernel", 2)?;
        let (s, p) = (opt_usize(o, "stride", k)?, opt_usize(o, "padding", 0)?);
        precharge(
            c,
            outsize::pool2d(x.value().shape(), k, s, p),
            &format!("`{op}`"),
        )?;
        Ok(Pool2d::square(k, s, p))
    };
    let c = ctx.clone();
    engine.register_fn("max_pool2d", move |x: Var, o: Map| -> R<Var> {
        track_var(
            &c,
            ag::max_pool2d(&x, pool(&c, &x, &o, "max_pool2d")?).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("avg_pool2d", move |x: Var, o: Map| -> R<Var> {
        track_var(
            &c,
            ag::avg_pool2d(&x, pool(&c, &x, &o, "avg_pool2d")?, true).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("global_avg_pool2d", move |x: Var| -> R<Var> {
        track_var(&c, ag::global_avg_pool2d(&x).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("dropout", move |x: Var, p: Dynamic, seed: INT| -> R<Var> {
        let p = float_arg(&p, "dropout's p")?;
        same(&c, &x, "dropout")?;
        track_var(
            &c,
            ag::dropout(&x, p as f32, seed.max(0) as u64).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("flatten", move |x: Var| -> R<Var> {
        track_var(&c, ag::flatten(&x).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("permute", move |x: Var, dims: Array| -> R<Var> {
        forward_only(&x, "permute")?;
        same(&c, &x, "permute")?;
        track(
            &c,
            ops::permute(x.value(), &shape_arg(&dims)?).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("transpose", move |x: Var| -> R<Var> {
        forward_only(&x, "transpose")?;
        same(&c, &x, "transpose")?;
        track(&c, ops::transpose(x.value(), -2, -1).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("one_hot", move |labels: Var, classes: INT| -> R<Var> {
        let classes = classes.max(0) as usize;
        precharge(&c, labels.value().numel().checked_mul(classes), "`one_hot`")?;
        track(
            &c,
            ops::one_hot(labels.value(), classes).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("cat", move |xs: Array, axis: INT| -> R<Var> {
        let vars: Vec<Var> = xs
            .iter()
            .map(|v| {
                v.read_lock::<Var>()
                    .map(|v| v.clone())
                    .ok_or_else(|| script_err("dtype", "cat takes an array of tensors"))
            })
            .collect::<R<_>>()?;
        vars.iter().try_for_each(|v| forward_only(v, "cat"))?;
        let refs: Vec<&crate::tensor::Tensor> = vars.iter().map(Var::value).collect();
        let shapes: Vec<&[usize]> = refs.iter().map(|t| t.shape()).collect();
        precharge(&c, outsize::cat(&shapes, axis), "`cat`")?;
        track(&c, ops::cat(&refs, axis as isize).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn(
        "upsample",
        move |x: Var, factor: INT, mode: &str| -> R<Var> {
            forward_only(&x, "upsample")?;
            let m = match mode {
                "nearest" => ops::Upsample::Nearest,
                "bilinear" => ops::Upsample::Bilinear {
                    align_corners: false,
                },
                o => {
                    return Err(script_err(
                        "invalid",
                        format!("upsample mode `{o}` is not nearest or bilinear"),
                    ));
                }
            };
            let s = x.shape();
            if s.len() != 4 || factor < 1 {
                return Err(script_err(
                    "shape",
                    format!("upsample needs N×C×H×W and a factor ≥ 1, got {s:?} and {factor}"),
                ));
            }
            let f = factor as usize;
            precharge(&c, outsize::upsample(s, f), "`upsample`")?;
            track(
                &c,
                ops::upsample(x.value(), (s[2] * f, s[3] * f), m).map_err(engine_err)?,
            )
        },
    );
    let c = ctx.clone();
    engine.register_fn("fused", move |expr: &str, xs: Array| -> R<Var> {
        let vars: Vec<Var> = xs
            .iter()
            .map(|v| {
                v.read_lock::<Var>()
                    .map(|v| v.clone())
                    .ok_or_else(|| script_err("dtype", "fused takes an array of tensors"))
            })
            .collect::<R<_>>()?;
        vars.iter().try_for_each(|v| forward_only(v, "fused"))?;
        let refs: Vec<&crate::tensor::Tensor> = vars.iter().map(Var::value).collect();
        let shapes: Vec<&[usize]> = refs.iter().map(|t| t.shape()).collect();
        precharge(&c, outsize::broadcast(&shapes), "`fused`")?;
        track(&c, ops::fused(expr, &refs).map_err(engine_err)?)
    });
}
