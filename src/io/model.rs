//! Model files in netcl's single-file layout, and training checkpoints.
//!
//! A model file is an `.npz` archive written to exactly the given path: one member `"{layer}:{key}"` per state
//! tensor (`0:weight`, `1:running_mean`, …; a Linear weight is (in, out)) and a member `__netcl_meta__`, a 0-d
//! unicode string holding `{"type": "Sequential", "config": [...], "version": 2, "format": "netcl.single-file"}`.
//! Files move both ways between netcl 0.3.2 and this engine for the layers netcl knows (Conv2d, Linear,
//! BatchNorm2d, ReLU, LeakyReLU, Sigmoid, Tanh, Dropout, MaxPool2d, Flatten). Loading resolves `path`, then
//! netcl's older pair `path.json` + `path.npz`, then `path.netcl`, and checks every tensor's presence and shape.
//!
//! Checkpoints (netcl's parameter files, with the optimiser's state) are in [`super::checkpoint`].

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::npz::{NpyArray, npz_bytes, read_npz, read_npz_bytes, write_npz};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::nn::{LayerConfig, Module, Sequential, build_sequential};
use crate::tensor::Tensor;

/// The member holding the model's JSON metadata.
pub const META_KEY: &str = "__netcl_meta__";
/// The member holding a checkpoint's optimiser metadata.
pub const OPTIM_KEY: &str = "__netcl_optim__";

pub(crate) fn model_members(model: &Sequential) -> Result<Vec<(String, NpyArray)>> {
    let mut members = Vec::new();
    for (name, t) in model.indexed_state() {
        members.push((name, NpyArray::f32(t.shape(), t.to_f32_vec()?)));
    }
    let meta = json!({"type": "Sequential", "config": model.configs(), "version": 2, "format": "netcl.single-file"});
    members.push((META_KEY.to_owned(), NpyArray::string(&meta.to_string())));
    Ok(members)
}

/// Writes `model` to exactly `path` (atomically).
///
/// A `MaxPool2d` with padding is refused: netcl 0.3.2's `MaxPool2d` has no padding and would load the file
/// without it, computing something else. (Padded pooling remains usable in configs and checkpoints.)
pub fn save_model(model: &Sequential, path: &Path) -> Result<()> {
    check_netcl_representable(model)?;
    write_npz(path, &model_members(model)?)
}

/// Refuses layers netcl would load differently from how they run here.
fn check_netcl_representable(model: &Sequential) -> Result<()> {
    for (i, c) in model.configs().iter().enumerate() {
        let pad = c.args.get("padding").and_then(Value::as_u64).unwrap_or(0);
        if c.kind == "MaxPool2d" && pad > 0 {
            return Err(Error::Invalid(format!(
                "layer {i} (MaxPool2d, padding {pad}): netcl 0.3.2's MaxPool2d has no padding and would load this model without it; save a checkpoint instead (io::save_checkpoint), or pad with a layer before an unpadded pool"
            )));
        }
    }
    Ok(())
}

pub(crate) fn resolve(
    path: &Path,
) -> Result<(std::collections::BTreeMap<String, NpyArray>, Value)> {
    let with = |ext: &str| PathBuf::from(format!("{}{ext}", path.display()));
    if path.exists() {
        let members = read_npz(path)?;
        let meta = members
            .get(META_KEY)
            .and_then(NpyArray::as_str)
            .ok_or_else(|| Error::Format {
                path: path.to_owned(),
                message: format!("no `{META_KEY}` member: not a netcl model file"),
            })?;
        let meta: Value = serde_json::from_str(meta).map_err(|e| Error::Format {
            path: path.to_owned(),
            message: format!("metadata: {e}"),
        })?;
        return Ok((members, meta));
    }
    let (json_path, npz_path) = (with(".json"), with(".npz"));
    if json_path.exists() && npz_path.exists() {
        let text = std::fs::read_to_string(&json_path).map_err(|e| Error::io(&json_path, e))?;
        let meta: Value = serde_json::from_str(&text).map_err(|e| Error::Format {
            path: json_path.clone(),
            message: e.to_string(),
        })?;
        return Ok((read_npz(&npz_path)?, meta));
    }
    let alt = with(".netcl");
    if alt.exists() {
        return resolve(&alt);
    }
    Err(Error::io(
        path,
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "model file not found (also tried .json+.npz and .netcl)",
        ),
    ))
}

pub(crate) fn configs_of(meta: &Value, path: &Path) -> Result<Vec<LayerConfig>> {
    let bad = |m: String| Error::Format {
        path: path.to_owned(),
        message: m,
    };
    if meta.get("type").and_then(Value::as_str) != Some("Sequential") {
        return Err(bad(
            "only Sequential models are stored in netcl model files".into(),
        ));
    }
    if let Some(c) = meta.get("config") {
        return serde_json::from_value(c.clone()).map_err(|e| bad(format!("config: {e}")));
    }
    // netcl's older layout: "layers": [{"type": …, arg: …}, …].
    let layers = meta
        .get("layers")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("metadata has neither `config` nor `layers`".into()))?;
    layers
        .iter()
        .map(|l| {
            let mut args = l.as_object().cloned().unwrap_or_default();
            let kind = args
                .remove("type")
                .and_then(|t| t.as_str().map(str::to_owned))
                .ok_or_else(|| bad("a layer has no type".into()))?;
            Ok(LayerConfig { kind, args })
        })
        .collect()
}

/// Reads a model file onto `device`. Every state tensor must be present with its layer's shape.
pub fn load_model(device: &Device, path: &Path) -> Result<Sequential> {
    let (members, meta) = resolve(path)?;
    let configs = configs_of(&meta, path)?;
    build_with_state(device, &configs, &members, path)
}

/// The bytes of the model file [`save_model`] would write, for a file that travels rather than lands on disk
/// (the playground offers them as a download).
pub fn model_to_bytes(model: &Sequential) -> Result<Vec<u8>> {
    check_netcl_representable(model)?;
    npz_bytes(&model_members(model)?)
}

/// A model file read from memory and checked as far as reading goes: its layer configs, and its state
/// tensors, not yet on any device. `name` stands for the file in error messages.
#[derive(Debug, Clone)]
pub struct ModelBytes {
    name: PathBuf,
    configs: Vec<LayerConfig>,
    members: std::collections::BTreeMap<String, NpyArray>,
}

impl ModelBytes {
    /// Parses the bytes of a model file (the single-file layout).
    pub fn parse(bytes: &[u8], name: &str) -> Result<ModelBytes> {
        let name = PathBuf::from(name);
        let bad = |message: String| Error::Format {
            path: name.clone(),
            message,
        };
        let members = read_npz_bytes(bytes).map_err(bad)?;
        let meta = members
            .get(META_KEY)
            .and_then(NpyArray::as_str)
            .ok_or_else(|| bad(format!("no `{META_KEY}` member: not a netcl model file")))?;
        let meta: Value = serde_json::from_str(meta).map_err(|e| bad(format!("metadata: {e}")))?;
        let configs = configs_of(&meta, &name)?;
        Ok(ModelBytes {
            name,
            configs,
            members,
        })
    }

    /// The layer configs the file describes.
    pub fn configs(&self) -> &[LayerConfig] {
        &self.configs
    }

    /// Builds the model on `device` and loads its state; every tensor must be present with its layer's shape.
    pub fn build(&self, device: &Device) -> Result<Sequential> {
        build_with_state(device, &self.configs, &self.members, &self.name)
    }
}

fn build_with_state(
    device: &Device,
    configs: &[LayerConfig],
    members: &std::collections::BTreeMap<String, NpyArray>,
    path: &Path,
) -> Result<Sequential> {
    let mut model = build_sequential(device, configs, 0)?;
    let mut state = Vec::new();
    for (name, arr) in members {
        if name == META_KEY || name == OPTIM_KEY || name.starts_with("optim:") {
            continue;
        }
        let t =
            Tensor::from_slice(device, &arr.to_f32()?, &arr.shape).map_err(|e| Error::Format {
                path: path.to_owned(),
                message: format!("member `{name}`: {e}"),
            })?;
        state.push((name.clone(), t));
    }
    model.load_state_dict(&state).map_err(|e| Error::Format {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    Ok(model)
}
