//! The tuning database: winners measured on real devices, shipped as data (`tuning/*.json`) and consulted
//! before anything is measured, the way CLBlast ships its per-device parameters.
//!
//! A table names one device class (vendor, name, compute units, OpenCL version, type) and maps
//! `"{kernel}::{shape_key}"` to the winning candidate. A device of exactly that class gets the table's winners
//! (source `database`); a device of the same type but another class may use them as its first guess (source
//! `heuristic`). `netcl tune export` writes the local cache in this form, so a table can be contributed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::device::{DeviceInfo, DeviceType};
use crate::error::{Error, Result};

/// The tables compiled into the binary.
const SHIPPED: &[(&str, &str)] = &[
    (
        "nvidia-h200.json",
        include_str!("../../tuning/nvidia-h200.json"),
    ),
    (
        "nvidia-h100.json",
        include_str!("../../tuning/nvidia-h100.json"),
    ),
    (
        "pocl-amd-epyc-2cu.json",
        include_str!("../../tuning/pocl-amd-epyc-2cu.json"),
    ),
];

/// The format tag every table carries.
pub const FORMAT: &str = "netcl-tuning-1";

/// The device a table was measured on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeviceClass {
    /// The vendor string.
    pub vendor: String,
    /// The device name.
    pub name: String,
    /// Compute units.
    pub compute_units: u32,
    /// The OpenCL version, `major.minor`.
    pub opencl: String,
    /// `gpu`, `cpu`, `accelerator` or `builtin`.
    #[serde(rename = "type")]
    pub kind: String,
}

impl DeviceClass {
    /// The class of a device.
    pub fn of(info: &DeviceInfo) -> DeviceClass {
        DeviceClass {
            vendor: info.vendor.trim().to_owned(),
            name: info.name.trim().to_owned(),
            compute_units: info.compute_units,
            opencl: opencl_version(&info.version),
            kind: kind_name(info.kind).to_owned(),
        }
    }
}

impl std::fmt::Display for DeviceClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({} compute units, OpenCL {}, {})",
            self.name, self.compute_units, self.opencl, self.kind
        )
    }
}

fn kind_name(k: DeviceType) -> &'static str {
    match k {
        DeviceType::Gpu => "gpu",
        DeviceType::Cpu => "cpu",
        DeviceType::Accelerator => "accelerator",
        _ => "builtin",
    }
}

/// `"OpenCL 3.0 CUDA 12.8"` → `"3.0"`; anything without a version number as it is.
pub fn opencl_version(v: &str) -> String {
    v.split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
        .unwrap_or(v.trim())
        .to_owned()
}

/// One device's table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TuningTable {
    /// Always [`FORMAT`].
    pub format: String,
    /// The device the winners were measured on.
    pub device: DeviceClass,
    /// How and when the winners were measured.
    #[serde(default)]
    pub measured: String,
    /// `"{kernel}::{shape_key}"` → winner.
    pub entries: BTreeMap<String, Value>,
    /// The programs the device's workloads built, `[family, kernel, defines]` (`netcl tune export` lists those
    /// of the local program cache). On a device of exactly this class, with builder helpers (GPUs in background
    /// mode), helpers build the ones not on disk yet as soon as the device is opened, so that an op's first
    /// call finds its programs ready instead of compiling them. Optional.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<(String, String, String)>,
}

impl TuningTable {
    /// Reads and parses the table file `path`; errors name it as `name`.
    pub fn read(path: &Path, name: &str) -> Result<TuningTable> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        TuningTable::parse(name, &text)
    }

    /// The table as `netcl tune export` writes it: pretty JSON and a final newline.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        let mut text = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::Invalid(format!("tuning table: {e}")))?;
        text.push(b'\n');
        Ok(text)
    }

    /// Parses a table, naming what is wrong with it.
    pub fn parse(name: &str, text: &str) -> Result<TuningTable> {
        let t: TuningTable = serde_json::from_str(text)
            .map_err(|e| Error::Invalid(format!("tuning table {name}: {e}")))?;
        if t.format != FORMAT {
            return Err(Error::Invalid(format!(
                "tuning table {name}: format `{}` is not `{FORMAT}`",
                t.format
            )));
        }
        Ok(t)
    }
}

/// Every table: the team table of `NETCL_TUNING_TABLE` (see [`team_table`]), the shipped ones, then those of
/// `NETCL_TUNING_DIR` (read again after each configuration reload; a bad table is reported and skipped).
pub fn tables() -> Arc<Vec<TuningTable>> {
    type Loaded = Option<(u64, Arc<Vec<TuningTable>>)>;
    static T: Mutex<Loaded> = Mutex::new(None);
    let generation = super::config::generation();
    let Ok(mut slot) = T.lock() else {
        return Arc::new(Vec::new());
    };
    if let Some((g, t)) = slot.as_ref()
        && *g == generation
    {
        return t.clone();
    }
    let dir = super::config::config().tuning_dir.clone();
    let team = match team_table() {
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            tracing::warn!("{e}; the team table is ignored");
            None
        }
        None => None,
    };
    let mut out: Vec<TuningTable> = team.into_iter().collect();
    out.extend(
        SHIPPED
            .iter()
            .filter_map(|(name, text)| match TuningTable::parse(name, text) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::warn!("{e}");
                    None
                }
            }),
    );
    if let Some(d) = &dir {
        out.extend(read_dir_tables(d));
    }
    let t = Arc::new(out);
    *slot = Some((generation, t.clone()));
    t
}

/// The team table named by `NETCL_TUNING_TABLE`: one file in the format `netcl tune export` writes, shared by
/// every machine of a team and consulted before the shipped tables (a team's own measurement is the closer
/// one). `None` when the variable is unset; an error names the file and what is wrong with it. Only files are
/// read: this build has no HTTP client, so a URL is refused with a message saying how to fetch it first.
pub fn team_table() -> Option<Result<TuningTable>> {
    let value = std::env::var("NETCL_TUNING_TABLE").ok()?;
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.starts_with("http://") || value.starts_with("https://") {
        return Some(Err(Error::Invalid(format!(
            "NETCL_TUNING_TABLE {value}: this build reads tuning tables from files only; download it first \
             (for example `curl -fsSo team.json {value}`) and give the file's path"
        ))));
    }
    Some(TuningTable::read(
        Path::new(value),
        &format!("NETCL_TUNING_TABLE {value}"),
    ))
}

fn read_dir_tables(dir: &Path) -> Vec<TuningTable> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        tracing::warn!("NETCL_TUNING_DIR {} is not readable", dir.display());
        return Vec::new();
    };
    let mut paths: Vec<_> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| {
            TuningTable::read(&p, &p.display().to_string())
                .map_err(|e| tracing::warn!("{e}"))
                .ok()
        })
        .collect()
}

/// Adds the programs of `parts` (tables `netcl tune export` wrote, each with a name for errors) to `base`,
/// keeping its winners: the base's programs first, then each part's new ones in order, each program once.
/// Returns how many were added. A part of another device class is refused before anything changes: its
/// programs were built for another device.
pub fn merge_programs(base: &mut TuningTable, parts: &[(String, TuningTable)]) -> Result<usize> {
    if let Some((name, t)) = parts.iter().find(|(_, t)| t.device != base.device) {
        return Err(Error::Invalid(format!(
            "tuning table {name}: recorded on {}, not on the base table's {}",
            t.device, base.device
        )));
    }
    let before = base.programs.len();
    let parts_programs = parts.iter().flat_map(|(_, t)| &t.programs);
    base.programs = unique_programs(base.programs.iter().chain(parts_programs));
    Ok(base.programs.len().saturating_sub(before))
}

/// The programs of `programs`, each once, in order.
fn unique_programs<'a>(
    programs: impl Iterator<Item = &'a (String, String, String)>,
) -> Vec<(String, String, String)> {
    let mut seen = std::collections::HashSet::new();
    programs.filter(|p| seen.insert(*p)).cloned().collect()
}

/// The programs to build ahead on a device of class `class`: those the tables of exactly that class list, each
/// once, in table order. When none lists any, those of tables of a sibling class, one that differs only by
/// name (same vendor, type, OpenCL version and compute units: NVIDIA's H100 and H200, for one). The candidates
/// an op offers depend on the device's limits, not its name, so a sibling's workloads compiled much the same
/// programs; one the device does not need costs a helper's time, never a call's.
pub fn programs_for(tables: &[TuningTable], class: &DeviceClass) -> Vec<(String, String, String)> {
    let collect = |pick: &dyn Fn(&DeviceClass) -> bool| {
        unique_programs(
            tables
                .iter()
                .filter(|t| pick(&t.device))
                .flat_map(|t| &t.programs),
        )
    };
    let exact = collect(&|d| d == class);
    if !exact.is_empty() {
        return exact;
    }
    collect(&|d| {
        d.name != class.name
            && d.vendor == class.vendor
            && d.kind == class.kind
            && d.opencl == class.opencl
            && d.compute_units == class.compute_units
    })
}

/// What the database says for a question.
#[derive(Debug, Clone, PartialEq)]
pub enum Hint {
    /// A table of this device's exact class has a winner.
    Exact { winner: Value, table: String },
    /// A table of another device of the same type has a winner for the same kernel and shape.
    SameType { winner: Value, table: String },
}

/// Looks `kernel` and `shape_key` up for a device of class `class` in `tables`; only winners that are among
/// `candidates` count.
pub fn lookup(
    tables: &[TuningTable],
    class: &DeviceClass,
    kernel: &str,
    shape_key: &str,
    candidates: &[Value],
) -> Option<Hint> {
    let entry = format!("{kernel}::{shape_key}");
    let usable = |t: &TuningTable| {
        t.entries
            .get(&entry)
            .filter(|w| candidates.contains(w))
            .cloned()
    };
    if let Some((t, w)) = tables
        .iter()
        .filter(|t| t.device == *class)
        .find_map(|t| usable(t).map(|w| (t, w)))
    {
        return Some(Hint::Exact {
            winner: w,
            table: t.device.name.clone(),
        });
    }
    tables
        .iter()
        .filter(|t| t.device.kind == class.kind)
        .find_map(|t| usable(t).map(|w| (t, w)))
        .map(|(t, w)| Hint::SameType {
            winner: w,
            table: t.device.name.clone(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opencl_versions_are_reduced_to_major_minor() {
        assert_eq!(opencl_version("OpenCL 3.0 CUDA 12.8.90"), "3.0");
        assert_eq!(opencl_version("OpenCL 1.2 pocl 3.1+debian"), "1.2");
        assert_eq!(opencl_version("none"), "none");
    }

    #[test]
    fn shipped_tables_parse() {
        for (name, text) in SHIPPED {
            let t = TuningTable::parse(name, text).expect("a shipped table parses");
            assert!(!t.entries.is_empty(), "{name} has entries");
        }
    }
}
