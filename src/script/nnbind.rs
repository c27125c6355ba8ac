//! Playground bindings of autograd, models, optimisers, the digits data set and the fit loop.
//!
//! `param(t)` makes a tensor whose gradient `backward(loss)` computes and `grad(p)` returns. Models are built
//! from netcl's layer configs or presets; `fit` trains one and reports each step with `progress`, so a page
//! draws the loss curve while it trains.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use rhai::{Array, Dynamic, Engine, FLOAT, INT, Map};

use super::bindings::{R, float_arg, seed_arg, track, track_var};
use super::modelsize::{Model, charge_parameters};
use super::render::f32_to_script;
use super::{Shared, engine_err, script_err};
use crate::autograd::{Var, no_grad};
use crate::data::{DataLoader, Digits, InMemory};
use crate::nn::{LayerConfig, Module, build_sequential, preset};
use crate::optim::Optimizer;
use crate::train::{FitEvent, FitOptions, fit};

/// An optimiser handle in scripts.
#[derive(Clone)]
pub(crate) struct Opt(pub(crate) Rc<RefCell<Optimizer>>);

fn configs(list: &Array) -> R<Vec<LayerConfig>> {
    let v = rhai::serde::from_dynamic::<serde_json::Value>(&Dynamic::from_array(list.clone()))
        .map_err(|e| script_err("invalid", format!("layer configs: {e}")))?;
    serde_json::from_value(v).map_err(|e| {
        script_err(
            "invalid",
            format!("layer configs are #{{type: …, args: #{{…}}}} maps: {e}"),
        )
    })
}

fn epoch_map(m: &crate::train::EpochMetrics) -> Map {
    let mut out = Map::new();
    out.insert("epoch".into(), (m.epoch as INT).into());
    out.insert("train_loss".into(), f32_to_script(m.train_loss).into());
    out.insert(
        "train_accuracy".into(),
        f32_to_script(m.train_accuracy).into(),
    );
    out.insert(
        "val_loss".into(),
        m.val_loss
            .map_or(Dynamic::UNIT, |v| Dynamic::from(f32_to_script(v))),
    );
    out.insert(
        "val_accuracy".into(),
        m.val_accuracy
            .map_or(Dynamic::UNIT, |v| Dynamic::from(f32_to_script(v))),
    );
    out.insert("seconds".into(), (m.seconds as FLOAT).into());
    out
}

fn tensor_of(m: &Map, key: &str) -> R<Var> {
    m.get(key)
        .and_then(|v| v.read_lock::<Var>().map(|v| v.clone()))
        .ok_or_else(|| script_err("invalid", format!("the data map has no tensor `{key}`")))
}

/// Registers autograd, model, optimiser, data and training functions.
pub(crate) fn register(engine: &mut Engine, ctx: &Shared) {
    engine.register_type_with_name::<Model>("Model");
    engine.register_type_with_name::<Opt>("Optimizer");
    engine.register_fn("param", |t: Var| Var::param(t.value().clone()));
    engine.register_fn("backward", |loss: Var| -> R<()> {
        loss.backward().map_err(engine_err)
    });
    let c = ctx.clone();
    engine.register_fn("grad", move |p: Var| -> R<Var> {
        match p.grad() {
            Some(g) => track(&c, g),
            None => Err(script_err(
                "invalid",
                "this tensor has no gradient: make it with param(…) and call backward(loss) first",
            )),
        }
    });
    engine.register_fn("zero_grad", |p: Var| p.zero_grad());
    engine.register_fn("detach", |p: Var| p.detach());

    let c = ctx.clone();
    engine.register_fn("sequential", move |layers: Array, seed: INT| -> R<Model> {
        let d = c.borrow().device.clone();
        let cfg = configs(&layers)?;
        charge_parameters(&c, &cfg)?;
        let m = build_sequential(&d, &cfg, seed_arg(seed)?).map_err(engine_err)?;
        Ok(Model(Rc::new(RefCell::new(m))))
    });
    let c = ctx.clone();
    engine.register_fn(
        "preset",
        move |name: &str, in_ch: INT, hw: INT, classes: INT, seed: INT| -> R<Model> {
            let d = c.borrow().device.clone();
            let cfg = preset(
                name,
                in_ch.max(0) as usize,
                hw.max(0) as usize,
                classes.max(0) as usize,
            )
            .map_err(engine_err)?;
            charge_parameters(&c, &cfg)?;
            let m = build_sequential(&d, &cfg, seed_arg(seed)?).map_err(engine_err)?;
            Ok(Model(Rc::new(RefCell::new(m))))
        },
    );
    let c = ctx.clone();
    engine.register_fn("forward", move |m: &mut Model, x: Var| -> R<Var> {
        track_var(&c, m.0.borrow_mut().forward(&x).map_err(engine_err)?)
    });
    let c = ctx.clone();
    engine.register_fn("predict", move |m: &mut Model, x: Var| -> R<Var> {
        let mut model = m.0.borrow_mut();
        let was = model.is_training();
        model.set_training(false);
        let r = no_grad(|| model.forward(&x));
        model.set_training(was);
        track_var(&c, r.map_err(engine_err)?)
    });
    engine.register_fn("train", |m: &mut Model| m.0.borrow_mut().set_training(true));
    engine.register_fn("eval", |m: &mut Model| m.0.borrow_mut().set_training(false));
    engine.register_fn("parameters", |m: &mut Model| -> Array {
        m.0.borrow()
            .parameters()
            .into_iter()
            .map(Dynamic::from)
            .collect()
    });
    engine.register_fn("to_string", |m: &mut Model| format!("{:?}", m.0.borrow()));
    engine.register_fn("layers", |m: &mut Model| -> Array {
        m.0.borrow()
            .layers()
            .iter()
            .map(|l| Dynamic::from(l.type_name().to_string()))
            .collect()
    });

    // An optimiser of `rule` over the model's parameters, from the script's `lr` and the rule's second number
    // `x` (SGD's momentum, AdamW's weight decay; named `x_name` in errors).
    let make = |m: &Model, rule: &str, lr: &Dynamic, x: Option<(&Dynamic, &str)>| -> R<Opt> {
        let lr = float_arg(lr, &format!("{rule}'s lr"))? as f32;
        let x = match x {
            Some((v, x_name)) => float_arg(v, &format!("{rule}'s {x_name}"))? as f32,
            None => 0.0,
        };
        let params = m.0.borrow().parameters();
        let o = match rule {
            "sgd" => Optimizer::sgd(params, lr, x, 0.0),
            "adam" => Optimizer::adam(params, lr, x),
            _ => Optimizer::adamw(params, lr, x),
        };
        Ok(Opt(Rc::new(RefCell::new(o.map_err(engine_err)?))))
    };
    engine.register_fn("sgd", move |m: Model, lr: Dynamic, mu: Dynamic| {
        make(&m, "sgd", &lr, Some((&mu, "momentum")))
    });
    engine.register_fn("adam", move |m: Model, lr: Dynamic| {
        make(&m, "adam", &lr, None)
    });
    engine.register_fn("adamw", move |m: Model, lr: Dynamic, wd: Dynamic| {
        make(&m, "adamw", &lr, Some((&wd, "weight_decay")))
    });
    engine.register_fn("step", |o: &mut Opt| -> R<()> {
        o.0.borrow_mut().step().map_err(engine_err)
    });
    engine.register_fn("zero_grad", |o: &mut Opt| o.0.borrow().zero_grad());
    engine.register_fn("set_lr", |o: &mut Opt, lr: Dynamic| -> R<()> {
        let lr = float_arg(&lr, "set_lr's lr")?;
        o.0.borrow_mut().set_lr(lr as f32).map_err(engine_err)
    });

    let c = ctx.clone();
    engine.register_fn("digits", move |seed: INT| -> R<Map> {
        let d = c.borrow().device.clone();
        let (tr, te) = Digits::load()
            .and_then(|ds| ds.split(0.2, seed.max(0) as u64))
            .map_err(engine_err)?;
        let mut out = Map::new();
        for (name, part) in [("train", tr), ("test", te)] {
            let n = crate::data::Dataset::len(&part);
            let mut x = vec![0.0f32; n * 64];
            let mut y = Vec::with_capacity(n);
            for i in 0..n {
                crate::data::Dataset::sample(&part, i, &mut x[i * 64..(i + 1) * 64]);
                y.push(crate::data::Dataset::label(&part, i));
            }
            // Standardised with the training set's pixel statistics (mean 0.3, deviation 0.38), as `netcl train` does.
            x.iter_mut().for_each(|v| *v = (*v - 0.3) / 0.38);
            let xt = crate::Tensor::from_slice(&d, &x, &[n, 1, 8, 8]).map_err(engine_err)?;
            let yt = crate::Tensor::from_slice(&d, &y, &[n]).map_err(engine_err)?;
            out.insert(format!("x_{name}").into(), Dynamic::from(track(&c, xt)?));
            out.insert(format!("y_{name}").into(), Dynamic::from(track(&c, yt)?));
        }
        Ok(out)
    });

    let c = ctx.clone();
    engine.register_fn("sample_image", move |name: &str| -> R<Var> {
        let d = c.borrow().device.clone();
        let (data, shape): (Vec<f32>, Vec<usize>) = match name {
            // The first sample of each digit 0..9 of the UCI digits, pixels in [0, 1].
            "digits" => {
                let ds = Digits::load().map_err(engine_err)?;
                let mut out = vec![0.0f32; 10 * 64];
                let mut found = [false; 10];
                for i in 0..crate::data::Dataset::len(&ds) {
                    let l = crate::data::Dataset::label(&ds, i) as usize;
                    if l < 10 && !found[l] {
                        crate::data::Dataset::sample(&ds, i, &mut out[l * 64..(l + 1) * 64]);
                        found[l] = true;
                    }
                }
                (out, vec![10, 1, 8, 8])
            }
            "checkerboard" => (
                (0..32 * 32)
                    .map(|i| (((i / 32) / 4 + (i % 32) / 4) % 2) as f32)
                    .collect(),
                vec![1, 1, 32, 32],
            ),
            "gradient" => (
                (0..3 * 32 * 32)
                    .map(|i| {
                        let (ch, y, x) = (i / 1024, (i / 32) % 32, i % 32);
                        [
                            x as f32 / 31.0,
                            y as f32 / 31.0,
                            1.0 - (x + y) as f32 / 62.0,
                        ][ch]
                    })
                    .collect(),
                vec![1, 3, 32, 32],
            ),
            other => {
                return Err(script_err(
                    "invalid",
                    format!(
                        "no sample image `{other}`; samples are digits, checkerboard, gradient"
                    ),
                ));
            }
        };
        track(
            &c,
            crate::Tensor::from_slice(&d, &data, &shape).map_err(engine_err)?,
        )
    });
    let c = ctx.clone();
    engine.register_fn(
        "fit",
        move |m: Model, o: Opt, data: Map, opts: Map| -> R<Array> {
            let epochs = opts
                .get("epochs")
                .and_then(|v| v.as_int().ok())
                .unwrap_or(3)
                .clamp(1, 200) as usize;
            let batch = opts
                .get("batch")
                .and_then(|v| v.as_int().ok())
                .unwrap_or(32)
                .clamp(1, 4096) as usize;
            let seed = opts
                .get("seed")
                .and_then(|v| v.as_int().ok())
                .unwrap_or(0)
                .max(0) as u64;
            let host = |k: &str| -> R<(Vec<f32>, Vec<usize>)> {
                let v = tensor_of(&data, k)?;
                Ok((
                    v.value().to_f32_vec().map_err(engine_err)?,
                    v.shape().to_vec(),
                ))
            };
            let labels = |k: &str| -> R<Vec<i32>> {
                tensor_of(&data, k)?
                    .value()
                    .to_vec::<i32>()
                    .map_err(engine_err)
            };
            let (xs, shape) = host("x_train")?;
            let ys = labels("y_train")?;
            let sample: Vec<usize> = shape.iter().skip(1).copied().collect();
            let train_set = InMemory::new(xs, &sample, ys).map_err(engine_err)?;
            let train = DataLoader::new(Arc::new(train_set), batch)
                .map(|l| l.shuffle(seed))
                .map_err(engine_err)?;
            let val = if data.contains_key("x_test") {
                let (xv, _) = host("x_test")?;
                let set = InMemory::new(xv, &sample, labels("y_test")?).map_err(engine_err)?;
                Some(DataLoader::new(Arc::new(set), 256).map_err(engine_err)?)
            } else {
                None
            };
            let device = c.borrow().device.clone();
            let cc = c.clone();
            let mut on_event = move |e: &FitEvent| {
                let v = serde_json::to_value(e).unwrap_or(serde_json::Value::Null);
                let sink = cc.borrow().progress.clone();
                if let Ok(mut f) = sink.try_borrow_mut() {
                    f(&v);
                }
            };
            let history = fit(
                &mut m.0.borrow_mut(),
                &mut o.0.borrow_mut(),
                &device,
                &train,
                val.as_ref(),
                &FitOptions {
                    epochs,
                    ..FitOptions::default()
                },
                &mut on_event,
            )
            .map_err(engine_err)?;
            Ok(history
                .iter()
                .map(|h| Dynamic::from_map(epoch_map(h)))
                .collect())
        },
    );
}
