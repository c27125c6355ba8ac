//! Model files in the playground: `save_model(m, name)` offers a model as a download, `load_model(name)` reads
//! one the reader uploaded with the run or one from the site's data folder, and `uploads()` lists what came
//! with the run.
//!
//! Nothing here touches the server's disk except to read the data folder: a saved file travels in the run's
//! result ([`SavedFile`], Base64), an upload travels in the run's request ([`UploadedFile`]). Names are plain
//! file names (letters, digits, `.`, `-`, `_`; no `/`, no `..`, no leading dot), and a file in the data folder
//! must resolve inside it, so a script can read nothing else of the machine.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rhai::{Array, Dynamic, Engine};
use serde::{Deserialize, Serialize};

use super::bindings::R;
use super::modelsize::{Model, charge_parameters};
use super::render::Output;
use super::{Shared, engine_err, script_err};
use crate::codec;
use crate::io::{ModelBytes, model_to_bytes};

/// The longest file name a run may save or load.
pub const MAX_NAME_CHARS: usize = 64;
/// The most files one run may upload.
pub const MAX_UPLOADS: usize = 8;

/// A file the reader sent with a run (the page's file input), its bytes in Base64.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UploadedFile {
    /// The file's name, as the script asks for it.
    pub name: String,
    /// Its bytes, standard Base64.
    pub data: String,
}

/// A file a run saved, offered to the reader as a download.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SavedFile {
    /// The name the script gave it.
    pub name: String,
    /// Its size in bytes.
    pub bytes: usize,
    /// Its bytes, standard Base64.
    pub data: String,
}

/// What a run may read besides its code: the files uploaded with it, and the site's data folder.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RunInputs {
    /// Files sent with the run.
    #[serde(default)]
    pub files: Vec<UploadedFile>,
    /// The folder `load_model(name)` reads from when no upload has the name (none: uploads only).
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
}

/// Checks a file name a script or a request gives: plain, short, and unable to leave its folder.
pub fn check_name(name: &str) -> std::result::Result<(), String> {
    let shown: String = name.chars().take(MAX_NAME_CHARS).collect();
    if name.is_empty() {
        return Err("a file name is empty".into());
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!(
            "the file name `{shown}…` is longer than {MAX_NAME_CHARS} characters"
        ));
    }
    if name.contains('/') || name.contains('\\') || name.contains("..") {
        return Err(format!(
            "`{shown}` is not a plain file name: no `/`, `\\` or `..`; files are read from the uploads and the data folder only"
        ));
    }
    if name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return Err(format!(
            "`{shown}` is not a plain file name: letters, digits, `.`, `-` and `_`, not starting with `.`"
        ));
    }
    Ok(())
}

/// Reads `name` from `dir`, which it must resolve inside, up to `max_bytes`.
fn read_data_file(dir: &Path, name: &str, max_bytes: usize) -> R<Vec<u8>> {
    let not_found = || {
        script_err(
            "not_found",
            format!("no upload and no file in the data folder is named `{name}`"),
        )
    };
    let root = dir.canonicalize().map_err(|_| not_found())?;
    let path = root.join(name).canonicalize().map_err(|_| not_found())?;
    if !path.starts_with(&root) {
        return Err(script_err(
            "invalid",
            format!("`{name}` leads outside the data folder"),
        ));
    }
    let meta = std::fs::metadata(&path).map_err(|_| not_found())?;
    if !meta.is_file() {
        return Err(not_found());
    }
    if meta.len() > max_bytes as u64 {
        return Err(script_err(
            "limit",
            format!(
                "`{name}` is {} bytes; max_file_bytes is {max_bytes}",
                meta.len()
            ),
        ));
    }
    std::fs::read(&path).map_err(|e| script_err("io", format!("reading `{name}`: {e}")))
}

/// The bytes of the file `name`: an upload of that name, else a file this run saved, else the data folder's.
fn find(ctx: &Shared, name: &str) -> R<Vec<u8>> {
    check_name(name).map_err(|m| script_err("invalid", m))?;
    let (upload, dir, max) = {
        let c = ctx.borrow();
        (
            c.inputs.files.iter().find(|f| f.name == name).cloned(),
            c.inputs.data_dir.clone(),
            c.limits.max_file_bytes,
        )
    };
    if let Some(f) = upload {
        let bytes = codec::base64_decode(&f.data).ok_or_else(|| {
            script_err(
                "invalid",
                format!("the upload `{name}` is not valid Base64"),
            )
        })?;
        if bytes.len() > max {
            return Err(script_err(
                "limit",
                format!(
                    "the upload `{name}` is {} bytes; max_file_bytes is {max}",
                    bytes.len()
                ),
            ));
        }
        return Ok(bytes);
    }
    let saved = ctx.borrow().saved.iter().find(|f| f.name == name).cloned();
    if let Some(f) = saved {
        return codec::base64_decode(&f.data).ok_or_else(|| {
            script_err("internal", format!("the saved file `{name}` is unreadable"))
        });
    }
    match dir {
        Some(dir) => read_data_file(&dir, name, max),
        None => Err(script_err(
            "not_found",
            format!("no upload is named `{name}`, and this run has no data folder"),
        )),
    }
}

/// Registers `save_model`, `load_model` and `uploads`.
pub(crate) fn register(engine: &mut Engine, ctx: &Shared) {
    let c = ctx.clone();
    engine.register_fn("save_model", move |m: &mut Model, name: &str| -> R<()> {
        check_name(name).map_err(|e| script_err("invalid", e))?;
        let bytes = model_to_bytes(&m.0.borrow()).map_err(engine_err)?;
        let mut ctx = c.borrow_mut();
        let max = ctx.limits.max_file_bytes;
        let others: usize = ctx
            .saved
            .iter()
            .filter(|f| f.name != name)
            .map(|f| f.bytes)
            .sum();
        if others + bytes.len() > max {
            return Err(script_err(
                "limit",
                format!(
                    "the model file `{name}` is {} bytes; with the {others} bytes saved before it, this run would offer more than max_file_bytes ({max})",
                    bytes.len()
                ),
            ));
        }
        ctx.saved.retain(|f| f.name != name);
        let size = bytes.len();
        ctx.saved.push(SavedFile {
            name: name.to_owned(),
            bytes: size,
            data: codec::base64(&bytes),
        });
        ctx.push(Output::File {
            name: name.to_owned(),
            bytes: size,
        });
        Ok(())
    });
    let c = ctx.clone();
    engine.register_fn("load_model", move |name: &str| -> R<Model> {
        let bytes = find(&c, name)?;
        let file = ModelBytes::parse(&bytes, name).map_err(engine_err)?;
        charge_parameters(&c, file.configs())?;
        let device = c.borrow().device.clone();
        let model = file.build(&device).map_err(engine_err)?;
        Ok(Model(Rc::new(RefCell::new(model))))
    });
    let c = ctx.clone();
    engine.register_fn("uploads", move || -> Array {
        c.borrow()
            .inputs
            .files
            .iter()
            .map(|f| Dynamic::from(f.name.clone()))
            .collect()
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain() {
        assert!(check_name("chargpt.npz").is_ok());
        assert!(check_name("model_2-b.npz").is_ok());
        for bad in [
            "",
            "../x.npz",
            "a/b.npz",
            "/etc/passwd",
            "..",
            ".hidden",
            "a\\b",
            "sp ace",
            "é.npz",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&"a".repeat(65)).is_err());
    }
}
