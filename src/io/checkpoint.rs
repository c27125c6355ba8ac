//! Parameter files and checkpoints in netcl's layout.
//!
//! netcl's `save_params` writes an `.npz` with one member per parameter, `p0`, `p1`, … in `parameters()`
//! order (NumPy appends `.npz` to a path without it); its `save_checkpoint` adds a JSON sidecar at the path
//! with the suffix `.json`: `{"optim_state": {…}, "config": {…}}`.
//!
//! A checkpoint written here is such a file and more: the parameters as `p{i}`, the other state (BatchNorm's
//! running statistics) as `"{layer}:{key}"`, the model's config in `__netcl_meta__`, the optimiser's buffers as
//! `optim:{param}:{buffer}` with its rule, learning rate and step count in `__netcl_optim__`, and the sidecar
//! with `{"optim_state": {"rule", "lr", "t"}, "config": {"type": "Sequential", "config": [...]}}`. netcl's
//! `load_checkpoint` reads its parameters; [`read_checkpoint`] reads it back whole, and reads netcl's own
//! checkpoints when their sidecar's `config` holds a Sequential config (else [`load_params`] fills a model
//! built by the caller).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::model::{META_KEY, OPTIM_KEY, configs_of};
use super::npz::{NpyArray, read_npz, write_npz};
use crate::autograd::Var;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::nn::{Module, Sequential, build_sequential};
use crate::optim::{OptimState, Optimizer};
use crate::tensor::Tensor;

/// The path NumPy's `savez` writes for `path`: unchanged when it ends in `.npz`, else with `.npz` appended.
pub fn npz_path(path: &Path) -> PathBuf {
    if path.extension().is_some_and(|e| e == "npz") {
        path.to_owned()
    } else {
        PathBuf::from(format!("{}.npz", path.display()))
    }
}

/// The JSON sidecar netcl's `save_checkpoint` writes beside `path`: the path with the suffix `.json`.
pub fn sidecar_path(path: &Path) -> PathBuf {
    path.with_extension("json")
}

fn names_for(n: usize, names: Option<&[String]>, op: &str) -> Result<Vec<String>> {
    match names {
        None => Ok((0..n).map(|i| format!("p{i}")).collect()),
        Some(v) if v.len() == n => Ok(v.to_vec()),
        Some(v) => Err(Error::Invalid(format!(
            "{op}: {} names for {n} parameters",
            v.len()
        ))),
    }
}

/// Writes `params` as netcl's `save_params` does (members `p0`, `p1`, … or `names`) to [`npz_path`]`(path)`,
/// atomically; returns the path written.
pub fn save_params(params: &[Var], path: &Path, names: Option<&[String]>) -> Result<PathBuf> {
    let names = names_for(params.len(), names, "save_params")?;
    let mut members = Vec::with_capacity(params.len());
    for (n, p) in names.iter().zip(params) {
        members.push((n.clone(), NpyArray::f32(p.shape(), p.value().to_f32_vec()?)));
    }
    let out = npz_path(path);
    write_npz(&out, &members)?;
    Ok(out)
}

/// The members of a parameter file at `path`, else at `path` with the suffix `.npz` (netcl's rule), else at
/// [`npz_path`]`(path)`.
fn read_param_file(path: &Path) -> Result<(PathBuf, BTreeMap<String, NpyArray>)> {
    for p in [path.to_owned(), path.with_extension("npz"), npz_path(path)] {
        if p.is_file() {
            let m = read_npz(&p)?;
            return Ok((p, m));
        }
    }
    Err(Error::io(
        path,
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "parameter file not found (also tried the .npz suffix)",
        ),
    ))
}

/// Tensors for `params` from `members` under `names`, every name present with its parameter's shape.
fn matched(
    device: &Device,
    params: &[Var],
    names: &[String],
    members: &BTreeMap<String, NpyArray>,
    path: &Path,
) -> Result<Vec<Tensor>> {
    let bad = |m: String| Error::Format {
        path: path.to_owned(),
        message: m,
    };
    names
        .iter()
        .zip(params)
        .map(|(n, p)| {
            let a = members
                .get(n)
                .ok_or_else(|| bad(format!("missing parameter `{n}`")))?;
            if a.shape != p.shape() {
                return Err(bad(format!(
                    "parameter `{n}` is {:?} in the file but {:?} in the model",
                    a.shape,
                    p.shape()
                )));
            }
            Tensor::from_slice(device, &a.to_f32()?, &a.shape)
        })
        .collect()
}

/// Reads netcl's parameter file into `params` (names `p0`, `p1`, … or `names`). Every name and shape is
/// checked before any parameter changes.
pub fn load_params(params: &[Var], path: &Path, names: Option<&[String]>) -> Result<()> {
    let names = names_for(params.len(), names, "load_params")?;
    let Some(first) = params.first() else {
        return Ok(());
    };
    let (file, members) = read_param_file(path)?;
    let ts = matched(first.value().device(), params, &names, &members, &file)?;
    for (p, t) in params.iter().zip(&ts) {
        p.value().assign(t)?;
    }
    Ok(())
}

/// Whether `t` is one of `params`' tensors.
fn is_param(t: &Tensor, params: &[Var]) -> bool {
    params.iter().any(|p| p.value().shares_storage(t))
}

/// Writes the model and the optimiser's state to `path` (atomically) in the layout described in the module
/// documentation, and netcl's JSON sidecar beside it.
pub fn save_checkpoint(model: &Sequential, optimizer: &Optimizer, path: &Path) -> Result<()> {
    let params = model.parameters();
    let mut members = Vec::new();
    for (i, p) in params.iter().enumerate() {
        members.push((
            format!("p{i}"),
            NpyArray::f32(p.shape(), p.value().to_f32_vec()?),
        ));
    }
    for (name, t) in model.indexed_state() {
        if !is_param(&t, &params) {
            members.push((name, NpyArray::f32(t.shape(), t.to_f32_vec()?)));
        }
    }
    let config = json!({"type": "Sequential", "config": model.configs(), "version": 2, "format": "netcl.checkpoint"});
    members.push((META_KEY.to_owned(), NpyArray::string(&config.to_string())));
    let st = optimizer.state_dict()?;
    for (i, (bufs, p)) in st.buffers.iter().zip(optimizer.params()).enumerate() {
        for (j, b) in bufs.iter().enumerate() {
            members.push((
                format!("optim:{i}:{j}"),
                NpyArray::f32(p.shape(), b.clone()),
            ));
        }
    }
    let optim = json!({"rule": st.rule, "lr": st.lr, "t": st.t, "params": st.buffers.len()});
    members.push((OPTIM_KEY.to_owned(), NpyArray::string(&optim.to_string())));
    write_npz(path, &members)?;
    let side = json!({"optim_state": optim, "config": config});
    let side_path = sidecar_path(path);
    crate::fsio::write_atomic(&side_path, side.to_string().as_bytes())
        .map_err(|e| Error::io(&side_path, e))
}

/// A checkpoint read back: the model, the optimiser state when the file has one, and the JSON metadata
/// (netcl's sidecar, or `{"config": …}` from the file).
pub struct Checkpoint {
    /// The model, built from the stored config and filled with the stored state.
    pub model: Sequential,
    /// The optimiser's state, when the checkpoint holds it (netcl's own checkpoints keep only free-form
    /// JSON in `optim_state`).
    pub optim: Option<OptimState>,
    /// netcl's sidecar metadata when present, else `{"config": …}` from the file.
    pub meta: Value,
}

fn optim_state(v: &Value, members: &BTreeMap<String, NpyArray>, path: &Path) -> Result<OptimState> {
    let bad = |m: String| Error::Format {
        path: path.to_owned(),
        message: m,
    };
    let rule = serde_json::from_value(v["rule"].clone()).map_err(|e| bad(format!("rule: {e}")))?;
    let n = v["params"]
        .as_u64()
        .ok_or_else(|| bad("optimiser metadata lacks `params`".into()))? as usize;
    let mut buffers = vec![Vec::new(); n];
    for (name, arr) in members {
        if let Some(rest) = name.strip_prefix("optim:") {
            let (i, j) = rest
                .split_once(':')
                .and_then(|(i, j)| Some((i.parse::<usize>().ok()?, j.parse::<usize>().ok()?)))
                .ok_or_else(|| bad(format!("bad member `{name}`")))?;
            let slot = buffers
                .get_mut(i)
                .ok_or_else(|| bad(format!("`{name}` names parameter {i} of {n}")))?;
            if slot.len() <= j {
                slot.resize(j + 1, Vec::new());
            }
            slot[j] = arr.to_f32()?;
        }
    }
    Ok(OptimState {
        rule,
        lr: v["lr"]
            .as_f64()
            .ok_or_else(|| bad("optimiser metadata lacks `lr`".into()))? as f32,
        t: v["t"]
            .as_u64()
            .ok_or_else(|| bad("optimiser metadata lacks `t`".into()))?,
        buffers,
    })
}

/// Reads a checkpoint written here or by netcl's `save_checkpoint` onto `device`.
///
/// The model's config comes from `__netcl_meta__`, else from the sidecar's `config` (a Sequential config, or
/// a bare list of layer configs). Parameters come from `p{i}` (or, in older files of this engine, from
/// `"{layer}:{key}"`), the other state from `"{layer}:{key}"` where present (netcl's checkpoints hold no
/// running statistics, so those keep their initial values). Everything is checked before the model is filled.
pub fn read_checkpoint(device: &Device, path: &Path) -> Result<Checkpoint> {
    let (file, members) = read_param_file(path)?;
    let bad = |m: String| Error::Format {
        path: file.clone(),
        message: m,
    };
    let side_path = sidecar_path(&file);
    let side: Option<Value> = if side_path.is_file() {
        let text = std::fs::read_to_string(&side_path).map_err(|e| Error::io(&side_path, e))?;
        Some(serde_json::from_str(&text).map_err(|e| Error::Format {
            path: side_path.clone(),
            message: e.to_string(),
        })?)
    } else {
        None
    };
    let meta: Value = match members.get(META_KEY).and_then(NpyArray::as_str) {
        Some(s) => serde_json::from_str(s).map_err(|e| bad(format!("metadata: {e}")))?,
        None => match side.as_ref().map(|s| &s["config"]) {
            Some(Value::Array(list)) => json!({"type": "Sequential", "config": list}),
            Some(c @ Value::Object(o)) if o.contains_key("config") || o.contains_key("layers") => {
                c.clone()
            }
            _ => {
                return Err(bad(
                    "a parameter checkpoint without a model config (no `__netcl_meta__` member and no Sequential `config` in its .json sidecar): build the model and call io::load_params".into(),
                ));
            }
        },
    };
    let configs = configs_of(&meta, &file)?;
    let mut model = build_sequential(device, &configs, 0)?;
    let params = model.parameters();
    let state = model.indexed_state();
    let mut fill: Vec<(Tensor, Tensor)> = Vec::new();
    if members.contains_key("p0") || params.is_empty() {
        let names = names_for(params.len(), None, "read_checkpoint")?;
        let ts = matched(device, &params, &names, &members, &file)?;
        fill.extend(params.iter().map(|p| p.value().clone()).zip(ts));
        let extra = format!("p{}", params.len());
        if members.contains_key(&extra) {
            return Err(bad(format!(
                "member `{extra}`: the file has more parameters than the model's {}",
                params.len()
            )));
        }
    }
    let from_params = !fill.is_empty() || params.is_empty();
    for (name, t) in &state {
        if from_params && is_param(t, &params) {
            continue;
        }
        match members.get(name) {
            Some(a) if a.shape != t.shape() => {
                return Err(bad(format!(
                    "`{name}` is {:?} in the file but {:?} in the model",
                    a.shape,
                    t.shape()
                )));
            }
            Some(a) => fill.push((
                t.clone(),
                Tensor::from_slice(device, &a.to_f32()?, &a.shape)?,
            )),
            None if is_param(t, &params) => {
                return Err(bad(format!("parameter `{name}` (or `p0`…) is missing")));
            }
            None => {}
        }
    }
    for (dst, src) in &fill {
        dst.assign(src)?;
    }
    let optim = match members.get(OPTIM_KEY).and_then(NpyArray::as_str) {
        Some(s) => {
            let v: Value = serde_json::from_str(s).map_err(|e| bad(e.to_string()))?;
            Some(optim_state(&v, &members, &file)?)
        }
        None => None,
    };
    model.set_training(true);
    Ok(Checkpoint {
        model,
        optim,
        meta: side.unwrap_or_else(|| json!({ "config": meta })),
    })
}

/// Reads a checkpoint with its optimiser state (see [`read_checkpoint`]); a checkpoint without one (netcl's
/// own) is an error naming [`read_checkpoint`].
pub fn load_checkpoint(device: &Device, path: &Path) -> Result<(Sequential, OptimState)> {
    let c = read_checkpoint(device, path)?;
    match c.optim {
        Some(o) => Ok((c.model, o)),
        None => Err(Error::Format {
            path: path.to_owned(),
            message: "the checkpoint holds no optimiser state of this engine (netcl keeps free-form JSON in `optim_state`): use io::read_checkpoint for the model and its metadata".into(),
        }),
    }
}
