//! The engine's API as playground functions. Every function that makes a tensor checks the run's element
//! limits; every engine error keeps its kind (`shape`, `dtype`, …) so the page can show it at its line.

use rhai::{Array, Dynamic, Engine, EvalAltResult, FLOAT, INT, Map};

use super::render::{self, Output};
use super::{Shared, engine_err, script_err};
use crate::autograd::{Var, ops as ag};
use crate::autotune;
use crate::ops;
use crate::tensor::Tensor;

pub(crate) type R<T> = Result<T, Box<EvalAltResult>>;

/// A readable form of a script value: tensors as a one-line summary, numbers with sensible precision, maps
/// as a two-column table (one `key  value` line per entry), arrays with their items shown the same way.
pub(crate) fn display(v: &Dynamic) -> String {
    if let Some(m) = v.read_lock::<Map>() {
        return map_table(&m);
    }
    inline(v)
}

/// A value on one line (how a map's entries and an array's items are shown).
fn inline(v: &Dynamic) -> String {
    if let Some(t) = v.read_lock::<Var>() {
        return describe(t.value());
    }
    if let Ok(f) = v.as_float() {
        return render::fmt_number(f);
    }
    if let Some(a) = v.read_lock::<Array>() {
        let items: Vec<String> = a.iter().map(inline).collect();
        return format!("[{}]", items.join(", "));
    }
    if let Some(m) = v.read_lock::<Map>() {
        let items: Vec<String> = m
            .iter()
            .map(|(k, v)| format!("{k}: {}", inline(v)))
            .collect();
        return format!("#{{{}}}", items.join(", "));
    }
    if v.is_unit() {
        return "()".into();
    }
    v.to_string()
}

/// A map as a table: keys padded to one column, values after them.
fn map_table(m: &Map) -> String {
    if m.is_empty() {
        return "#{}".into();
    }
    let width = m.keys().map(|k| k.chars().count()).max().unwrap_or(0);
    m.iter()
        .map(|(k, v)| format!("{k:<width$}  {}", inline(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn describe(t: &Tensor) -> String {
    match render::summarize(t, "") {
        Ok(s) => {
            let preview: Vec<String> = s
                .preview
                .iter()
                .take(6)
                .map(|&v| render::fmt_number(v as f64))
                .collect();
            let more = if s.numel > 6 { ", …" } else { "" };
            format!(
                "Tensor{:?} {} [{}{more}] min={} max={} mean={}",
                s.shape,
                s.dtype,
                preview.join(", "),
                s.min.map_or("–".into(), |v| render::fmt_number(v as f64)),
                s.max.map_or("–".into(), |v| render::fmt_number(v as f64)),
                s.mean.map_or("–".into(), |v| render::fmt_number(v as f64))
            )
        }
        Err(e) => format!("Tensor{:?} (unreadable: {e})", t.shape()),
    }
}

pub(crate) fn shape_arg(a: &Array) -> R<Vec<usize>> {
    a.iter()
        .map(|d| match d.as_int() {
            Ok(-1) => Ok(usize::MAX),
            Ok(v) if v >= 0 => Ok(v as usize),
            _ => Err(script_err(
                "shape",
                format!("a shape holds non-negative integers (or one -1), got {d}"),
            )),
        })
        .collect()
}

pub(crate) fn num(d: &Dynamic) -> Option<f64> {
    d.as_float()
        .ok()
        .or_else(|| d.as_int().ok().map(|i| i as f64))
}

/// A number argument: an integer literal is accepted wherever a float is (`clamp(x, 0, 6)`).
pub(crate) fn float_arg(v: &Dynamic, what: &str) -> R<f64> {
    num(v).ok_or_else(|| {
        script_err(
            "dtype",
            format!("{what} is a number, got {} ({v})", v.type_name()),
        )
    })
}

pub(crate) fn opt_f(m: &Map, key: &str, default: f64) -> R<f64> {
    match m.get(key) {
        None => Ok(default),
        Some(v) => num(v).ok_or_else(|| {
            script_err(
                "invalid",
                format!("option `{key}` must be a number, got {v}"),
            )
        }),
    }
}

pub(crate) fn seed_arg(v: INT) -> R<u64> {
    u64::try_from(v).map_err(|_| {
        script_err(
            "invalid",
            format!("a seed is a non-negative integer, got {v}"),
        )
    })
}

/// Charges a new tensor against the run's limits and wraps it as a constant.
pub(crate) fn track(ctx: &Shared, t: Tensor) -> R<Var> {
    Ok(Var::constant(charge(ctx, t)?))
}

/// Charges the value of an op's result against the run's limits.
pub(crate) fn track_var(ctx: &Shared, v: Var) -> R<Var> {
    charge(ctx, v.value().clone())?;
    Ok(v)
}

fn charge(ctx: &Shared, t: Tensor) -> R<Tensor> {
    let mut c = ctx.borrow_mut();
    let n = t.numel();
    if n > c.limits.max_tensor_elements {
        return Err(script_err(
            "limit",
            format!(
                "a tensor of shape {:?} has {n} elements; max_tensor_elements is {}",
                t.shape(),
                c.limits.max_tensor_elements
            ),
        ));
    }
    c.elements += n;
    if c.elements > c.limits.max_run_elements {
        return Err(script_err(
            "limit",
            format!(
                "this run made {} tensor elements in all; max_run_elements is {}",
                c.elements, c.limits.max_run_elements
            ),
        ));
    }
    Ok(t)
}

/// Checks that an op's output of `elements` elements (`None`: overflowing) fits the per-tensor limit and the
/// run's remaining budget, before the op allocates it. `track`/`track_var` charge it once made.
pub(crate) fn precharge(ctx: &Shared, elements: Option<usize>, what: &str) -> R<()> {
    let c = ctx.borrow();
    let (max, run) = (c.limits.max_tensor_elements, c.limits.max_run_elements);
    match elements {
        Some(n) if n <= max => {
            if c.elements.saturating_add(n) > run {
                return Err(script_err(
                    "limit",
                    format!(
                        "{what} would make {n} more elements, {} in all; max_run_elements is {run}",
                        c.elements.saturating_add(n)
                    ),
                ));
            }
            Ok(())
        }
        _ => Err(script_err(
            "limit",
            format!(
                "{what} would make {} elements; max_tensor_elements is {max}",
                elements.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string())
            ),
        )),
    }
}

/// The element count of `a` and `b` broadcast together; `Some(0)` when they do not broadcast (the op itself
/// then reports the error), `None` on overflow.
pub(crate) fn broadcast_elements(a: &[usize], b: &[usize]) -> Option<usize> {
    let rank = a.len().max(b.len());
    let mut n = 1usize;
    for i in 0..rank {
        let x = if i < a.len() { a[a.len() - 1 - i] } else { 1 };
        let y = if i < b.len() { b[b.len() - 1 - i] } else { 1 };
        let d = match (x, y) {
            (x, y) if x == y || y == 1 => x,
            (1, y) => y,
            _ => return Some(0),
        };
        n = n.checked_mul(d)?;
    }
    Some(n)
}

/// Checks a new tensor's shape against the per-tensor limit and the run's remaining budget before anything is
/// allocated.
pub(crate) fn precheck(ctx: &Shared, shape: &[usize]) -> R<()> {
    if shape.contains(&usize::MAX) {
        return Err(script_err(
            "shape",
            format!(
                "a new tensor's shape holds sizes of 0 or more; -1 (infer a size) is only for reshape, got {:?}",
                shape
                    .iter()
                    .map(|&d| if d == usize::MAX { -1 } else { d as i64 })
                    .collect::<Vec<_>>()
            ),
        ));
    }
    let max = ctx.borrow().limits.max_tensor_elements;
    let n = shape
        .iter()
        .filter(|&&d| d != usize::MAX)
        .try_fold(1usize, |a, &d| a.checked_mul(d));
    match n {
        Some(n) if n <= max => precharge(ctx, Some(n), &format!("a new tensor of shape {shape:?}")),
        _ => Err(script_err(
            "limit",
            format!("shape {shape:?} exceeds max_tensor_elements ({max})"),
        )),
    }
}

fn flatten(v: &Dynamic, out: &mut Vec<f32>, shape: &mut Vec<usize>, depth: usize) -> R<()> {
    if let Some(a) = v.read_lock::<Array>() {
        if shape.len() == depth {
            shape.push(a.len());
        } else if shape[depth] != a.len() {
            return Err(script_err(
                "shape",
                format!(
                    "ragged nested array: length {} where {} was expected",
                    a.len(),
                    shape[depth]
                ),
            ));
        }
        for x in a.iter() {
            flatten(x, out, shape, depth + 1)?;
        }
        return Ok(());
    }
    if shape.len() != depth {
        return Err(script_err(
            "shape",
            "ragged nested array: a number where an array was expected",
        ));
    }
    out.push(num(v).ok_or_else(|| {
        script_err(
            "dtype",
            format!("tensor() takes numbers, got {}", v.type_name()),
        )
    })? as f32);
    Ok(())
}

/// `op(a, b)` on script tensors: differentiable for + − × ÷, forward-only for the others.
fn bin(op: ops::BinaryOp, a: &Var, b: &Var) -> R<Var> {
    let r = match op {
        ops::BinaryOp::Add => ag::add(a, b),
        ops::BinaryOp::Sub => ag::sub(a, b),
        ops::BinaryOp::Mul => ag::mul(a, b),
        ops::BinaryOp::Div => ag::div(a, b),
        _ => {
            if a.requires_grad() || b.requires_grad() {
                return Err(script_err(
                    "unsupported",
                    format!(
                        "{} has no gradient; apply it to values without one",
                        op.name()
                    ),
                ));
            }
            ops::binary(op, a.value(), b.value()).map(Var::constant)
        }
    };
    r.map_err(engine_err)
}

fn scalar(like: &Var, v: f64) -> R<Var> {
    Tensor::full(like.value().device(), &[], v as f32)
        .map(Var::constant)
        .map_err(engine_err)
}

macro_rules! binary {
    ($engine:expr, $ctx:expr, $name:literal, $op:expr) => {{
        let c = $ctx.clone();
        $engine.register_fn($name, move |a: Var, b: Var| -> R<Var> {
            let n = broadcast_elements(a.value().shape(), b.value().shape());
            precharge(&c, n, concat!("`", $name, "`"))?;
            track_var(&c, bin($op, &a, &b)?)
        });
        let c = $ctx.clone();
        $engine.register_fn($name, move |a: Var, b: FLOAT| -> R<Var> {
            precharge(&c, Some(a.value().numel()), concat!("`", $name, "`"))?;
            track_var(&c, bin($op, &a, &scalar(&a, b)?)?)
        });
        let c = $ctx.clone();
        $engine.register_fn($name, move |a: Var, b: INT| -> R<Var> {
            precharge(&c, Some(a.value().numel()), concat!("`", $name, "`"))?;
            track_var(&c, bin($op, &a, &scalar(&a, b as f64)?)?)
        });
        let c = $ctx.clone();
        $engine.register_fn($name, move |a: FLOAT, b: Var| -> R<Var> {
            precharge(&c, Some(b.value().numel()), concat!("`", $name, "`"))?;
            track_var(&c, bin($op, &scalar(&b, a)?, &b)?)
        });
        let c = $ctx.clone();
        $engine.register_fn($name, move |a: INT, b: Var| -> R<Var> {
            precharge(&c, Some(b.value().numel()), concat!("`", $name, "`"))?;
            track_var(&c, bin($op, &scalar(&b, a as f64)?, &b)?)
        });
    }};
}

/// Registers the core of the playground language on `engine`: printing, tensor creation and methods, binary
/// operators. The op and model bindings come next, then [`register_output`] (see `script::register_all`).
pub(crate) fn register_core(engine: &mut Engine, ctx: &Shared) {
    engine.register_type_with_name::<Var>("Tensor");
    let c = ctx.clone();
    engine.on_print(move |s| c.borrow_mut().push(Output::Text { text: s.to_owned() }));
    let c = ctx.clone();
    engine.on_debug(move |s, _, pos| {
        let at = pos
            .line()
            .map(|l| format!("[line {l}] "))
            .unwrap_or_default();
        c.borrow_mut().push(Output::Text {
            text: format!("{at}{s}"),
        })
    });
    // `print` of a map or a number is overloaded (it returns the text `on_print` receives) so it shows a table
    // or a sensible precision; Rhai's own `print` gives `#{"a": 1}` and `0.30000000000000004`.
    engine.register_fn("print", |m: Map| map_table(&m));
    engine.register_fn("print", render::fmt_number);
    engine.register_fn("to_string", |t: &mut Var| describe(t.value()));
    engine.register_fn("to_debug", |t: &mut Var| describe(t.value()));
    // Numbers, maps and arrays print the way `display` shows them (`print(0.1 + 0.2)` is `0.3`; a map is a table).
    engine.register_fn("to_string", |v: FLOAT| render::fmt_number(v));
    engine.register_fn("to_debug", |v: FLOAT| render::fmt_number(v));
    engine.register_fn("to_string", |m: &mut Map| map_table(m));
    engine.register_fn("to_debug", |m: &mut Map| {
        inline(&Dynamic::from_map(m.clone()))
    });
    engine.register_fn("to_string", |a: &mut Array| {
        inline(&Dynamic::from_array(a.clone()))
    });
    engine.register_fn("to_debug", |a: &mut Array| {
        inline(&Dynamic::from_array(a.clone()))
    });

    register_creation(engine, ctx);
    register_tensor_methods(engine, ctx);

    binary!(engine, ctx, "add", ops::BinaryOp::Add);
    binary!(engine, ctx, "sub", ops::BinaryOp::Sub);
    binary!(engine, ctx, "mul", ops::BinaryOp::Mul);
    binary!(engine, ctx, "div", ops::BinaryOp::Div);
    binary!(engine, ctx, "maximum", ops::BinaryOp::Max);
    binary!(engine, ctx, "minimum", ops::BinaryOp::Min);
    binary!(engine, ctx, "pow", ops::BinaryOp::Pow);
    binary!(engine, ctx, "+", ops::BinaryOp::Add);
    binary!(engine, ctx, "-", ops::BinaryOp::Sub);
    binary!(engine, ctx, "*", ops::BinaryOp::Mul);
    binary!(engine, ctx, "/", ops::BinaryOp::Div);
}

fn register_creation(engine: &mut Engine, ctx: &Shared) {
    let c = ctx.clone();
    engine.register_fn("device", move || -> Map {
        let c = c.borrow();
        let i = c.device.info();
        let mut m = Map::new();
        m.insert("name".into(), i.name.clone().into());
        m.insert("kind".into(), i.kind.as_str().into());
        m.insert("platform".into(), i.platform.clone().into());
        m.insert("driver".into(), i.driver.clone().into());
        m.insert("compute_units".into(), (i.compute_units as INT).into());
        m.insert(
            "global_mem_bytes".into(),
            (i.global_mem_bytes as INT).into(),
        );
        m.insert("local_mem_bytes".into(), (i.local_mem_bytes as INT).into());
        m.insert(
            "max_work_group_size".into(),
            (i.max_work_group_size as INT).into(),
        );
        m
    });
    // zeros(shape) and ones(shape): one binding, two constructors.
    type Filled = fn(&crate::Device, &[usize]) -> crate::Result<Tensor>;
    let filled: [(&str, Filled); 2] = [("zeros", Tensor::zeros), ("ones", Tensor::ones)];
    for (name, make) in filled {
        let c = ctx.clone();
        engine.register_fn(name, move |shape: Array| -> R<Var> {
            let s = shape_arg(&shape)?;
            precheck(&c, &s)?;
            let d = c.borrow().device.clone();
            track(&c, make(&d, &s).map_err(engine_err)?)
        });
    }
    let c = ctx.clone();
    engine.register_fn("full", move |shape: Array, v: Dynamic| -> R<Var> {
        let s = shape_arg(&shape)?;
        precheck(&c, &s)?;
        let v = num(&v).ok_or_else(|| script_err("dtype", "full() takes a number"))?;
        let d = c.borrow().device.clone();
        track(&c, Tensor::full(&d, &s, v as f32).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("full_int", move |shape: Array, v: Dynamic| -> R<Var> {
        let s = shape_arg(&shape)?;
        precheck(&c, &s)?;
        let v = match num(&v) {
            Some(f) if f.fract() == 0.0 && (i32::MIN as f64..=i32::MAX as f64).contains(&f) => {
                f as i32
            }
            _ => {
                return Err(script_err(
                    "dtype",
                    format!("full_int() takes a whole number that fits i32, got {v}"),
                ));
            }
        };
        let n = s
            .iter()
            .try_fold(1usize, |a, &d| {
                if d == usize::MAX {
                    None
                } else {
                    a.checked_mul(d)
                }
            })
            .ok_or_else(|| {
                script_err(
                    "shape",
                    format!("full_int() needs every size given, got {shape:?}"),
                )
            })?;
        let d = c.borrow().device.clone();
        track(
            &c,
            Tensor::from_slice(&d, &vec![v; n], &s).map_err(engine_err)?,
        )
    });
    let arange = |ctx: &Shared, start: f64, end: f64, step: f64| -> R<Var> {
        if step != 0.0 && ((end - start) / step).is_finite() {
            precheck(ctx, &[((end - start) / step).ceil().max(0.0) as usize])?;
        }
        let d = ctx.borrow().device.clone();
        track(
            ctx,
            Tensor::arange(&d, start as f32, end as f32, step as f32).map_err(engine_err)?,
        )
    };
    let c = ctx.clone();
    engine.register_fn("arange", move |end: Dynamic| -> R<Var> {
        arange(
            &c,
            0.0,
            num(&end).ok_or_else(|| script_err("dtype", "arange takes numbers"))?,
            1.0,
        )
    });
    let c = ctx.clone();
    engine.register_fn("arange", move |start: Dynamic, end: Dynamic| -> R<Var> {
        let n = |d: &Dynamic| num(d).ok_or_else(|| script_err("dtype", "arange takes numbers"));
        arange(&c, n(&start)?, n(&end)?, 1.0)
    });
    let c = ctx.clone();
    engine.register_fn(
        "arange",
        move |start: Dynamic, end: Dynamic, step: Dynamic| -> R<Var> {
            let n = |d: &Dynamic| num(d).ok_or_else(|| script_err("dtype", "arange takes numbers"));
            arange(&c, n(&start)?, n(&end)?, n(&step)?)
        },
    );
    let randn = |ctx: &Shared, shape: &Array, seed: u64, mean: f64, std: f64| -> R<Var> {
        let s = shape_arg(shape)?;
        precheck(ctx, &s)?;
        let d = ctx.borrow().device.clone();
        track(
            ctx,
            Tensor::randn(&d, &s, mean as f32, std as f32, seed).map_err(engine_err)?,
        )
    };
    let c = ctx.clone();
    engine.register_fn("randn", move |shape: Array| randn(&c, &shape, 0, 0.0, 1.0));
    let c = ctx.clone();
    engine.register_fn("randn", move |shape: Array, seed: INT| {
        randn(&c, &shape, seed_arg(seed)?, 0.0, 1.0)
    });
    let c = ctx.clone();
    engine.register_fn("randn", move |shape: Array, o: Map| {
        let seed = seed_arg(o.get("seed").and_then(|v| v.as_int().ok()).unwrap_or(0))?;
        randn(
            &c,
            &shape,
            seed,
            opt_f(&o, "mean", 0.0)?,
            opt_f(&o, "std", 1.0)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("rand", move |shape: Array, seed: INT| -> R<Var> {
        let s = shape_arg(&shape)?;
        precheck(&c, &s)?;
        let d = c.borrow().device.clone();
        track(
            &c,
            Tensor::rand_uniform(&d, &s, 0.0, 1.0, seed_arg(seed)?).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("tensor", move |data: Array| -> R<Var> {
        let mut vals = Vec::new();
        let mut shape = Vec::new();
        flatten(&Dynamic::from_array(data), &mut vals, &mut shape, 0)?;
        precheck(&c, &shape)?;
        let d = c.borrow().device.clone();
        track(
            &c,
            Tensor::from_slice(&d, &vals, &shape).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn("tensor", move |data: Array, shape: Array| -> R<Var> {
        let mut vals = Vec::new();
        let mut ignored = Vec::new();
        flatten(&Dynamic::from_array(data), &mut vals, &mut ignored, 0)?;
        let s = shape_arg(&shape)?;
        precheck(&c, &s)?;
        let d = c.borrow().device.clone();
        track(&c, Tensor::from_slice(&d, &vals, &s).map_err(engine_err)?)
    });
}

fn register_tensor_methods(engine: &mut Engine, ctx: &Shared) {
    engine.register_get("shape", |t: &mut Var| -> Array {
        t.shape().iter().map(|&d| Dynamic::from(d as INT)).collect()
    });
    engine.register_get("numel", |t: &mut Var| t.value().numel() as INT);
    engine.register_get("rank", |t: &mut Var| t.value().rank() as INT);
    engine.register_get("dtype", |t: &mut Var| t.value().dtype().name().to_string());
    engine.register_get("requires_grad", |t: &mut Var| t.requires_grad());
    engine.register_fn("reshape", |t: &mut Var, shape: Array| -> R<Var> {
        ag::reshape(t, &shape_arg(&shape)?).map_err(engine_err)
    });
    let c = ctx.clone();
    engine.register_fn("to_array", move |t: &mut Var| -> R<Array> {
        let max = c.borrow().limits.max_tensor_elements.min(1 << 20);
        let n = t.value().numel();
        if n > max {
            return Err(script_err(
                "limit",
                format!("to_array copies at most {max} elements; this tensor has {n}"),
            ));
        }
        Ok(t.value()
            .to_f32_vec()
            .map_err(engine_err)?
            .into_iter()
            .map(|v| Dynamic::from(render::f32_to_script(v)))
            .collect())
    });
    engine.register_fn("item", |t: &mut Var| -> R<FLOAT> {
        if t.value().numel() != 1 {
            return Err(script_err(
                "shape",
                format!(
                    "item() needs a one-element tensor, got shape {:?}",
                    t.shape()
                ),
            ));
        }
        Ok(render::f32_to_script(
            t.value().to_f32_vec().map_err(engine_err)?[0],
        ))
    });
    let c = ctx.clone();
    engine.register_fn("sum", move |t: &mut Var| -> R<Var> {
        track_var(&c, ag::sum_all(t).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("cast", move |t: &mut Var, dtype: &str| -> R<Var> {
        let d = match dtype {
            "f32" => crate::tensor::DType::F32,
            "f16" => crate::tensor::DType::F16,
            "i32" => crate::tensor::DType::I32,
            other => {
                return Err(script_err(
                    "dtype",
                    format!("cast: `{other}` is not f32, f16 or i32"),
                ));
            }
        };
        precharge(&c, Some(t.value().numel()), "`cast`")?;
        track(&c, t.value().cast(d).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("to_device", move |t: &mut Var, selector: &str| -> R<Var> {
        precharge(&c, Some(t.value().numel()), "`to_device`")?;
        let d = crate::Device::select(Some(selector)).map_err(engine_err)?;
        track(&c, t.value().to_device(&d).map_err(engine_err)?)
    });
}

pub(crate) fn register_output(engine: &mut Engine, ctx: &Shared) {
    let c = ctx.clone();
    engine.register_fn("inspect", move |t: Var| -> R<()> {
        let s = render::summarize(t.value(), "").map_err(engine_err)?;
        c.borrow_mut().push(Output::Tensor(s));
        Ok(())
    });
    let c = ctx.clone();
    engine.register_fn("inspect", move |t: Var, title: &str| -> R<()> {
        let s = render::summarize(t.value(), title).map_err(engine_err)?;
        c.borrow_mut().push(Output::Tensor(s));
        Ok(())
    });
    let c = ctx.clone();
    engine.register_fn("show", move |t: Var| -> R<()> {
        let img = render::image(t.value(), "").map_err(engine_err)?;
        c.borrow_mut().push(img);
        Ok(())
    });
    let c = ctx.clone();
    engine.register_fn("show", move |t: Var, title: &str| -> R<()> {
        let img = render::image(t.value(), title).map_err(engine_err)?;
        c.borrow_mut().push(img);
        Ok(())
    });
    let c = ctx.clone();
    engine.register_fn("decisions", move || -> Array {
        autotune::decisions_since(c.borrow().seq0)
            .into_iter()
            .rev()
            .take(64)
            .rev()
            .map(|d| {
                let mut m = Map::new();
                m.insert("kernel".into(), d.kernel.clone().into());
                m.insert(
                    "fields".into(),
                    render::explain_shape(&d.kernel, &d.shape_key).into(),
                );
                m.insert("shape".into(), d.shape_key.into());
                m.insert("winner".into(), d.winner_label.into());
                m.insert(
                    "source".into(),
                    format!("{:?}", d.source).to_lowercase().into(),
                );
                m.insert(
                    "note".into(),
                    d.note.clone().map_or(Dynamic::UNIT, Dynamic::from),
                );
                let cands: Array = d
                    .candidates
                    .iter()
                    .map(|cand| {
                        let mut cm = Map::new();
                        cm.insert("candidate".into(), cand.label.clone().into());
                        cm.insert(
                            "ms".into(),
                            cand.ms.map_or(Dynamic::UNIT, |v| Dynamic::from(v as FLOAT)),
                        );
                        Dynamic::from_map(cm)
                    })
                    .collect();
                m.insert("candidates".into(), Dynamic::from_array(cands));
                Dynamic::from_map(m)
            })
            .collect()
    });
    let c = ctx.clone();
    engine.register_fn("progress", move |v: Dynamic| -> R<()> {
        let json = rhai::serde::from_dynamic::<serde_json::Value>(&v)
            .unwrap_or_else(|_| serde_json::Value::String(v.to_string()));
        let sink = c.borrow().progress.clone();
        if let Ok(mut f) = sink.try_borrow_mut() {
            f(&json);
        }
        Ok(())
    });
    engine.register_fn("build_ms", || -> FLOAT {
        (crate::program::build_ms_total() * 1e3).round() / 1e3
    });
    engine.register_fn("kernel_families", || -> Array {
        crate::program::kernel_families()
            .map(|f| Dynamic::from(f.to_string()))
            .collect()
    });
    let c = ctx.clone();
    engine.register_fn("pool_stats", move || -> Map {
        let s = c.borrow().device.pool_stats();
        let mut m = Map::new();
        m.insert("hits".into(), (s.hits as INT).into());
        m.insert("misses".into(), (s.misses as INT).into());
        m.insert("bytes_in_use".into(), (s.bytes_in_use as INT).into());
        m.insert("bytes_cached".into(), (s.bytes_cached as INT).into());
        m
    });
}
