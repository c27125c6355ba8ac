//! Device selection: the only code that names concrete backends.
//!
//! Lists every OpenCL platform and device, then the built-in CPU device, and opens the one a selector names.
//! Selecting the same device twice in a process returns the same handle, so kernels, the buffer pool and the
//! tuner's memory are shared.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::backend::{cpu, opencl};
use crate::device::{Device, DeviceInfo, DeviceType};
use crate::error::{Error, Result};

/// Lists every OpenCL device of every platform, then the built-in CPU device (always last).
///
/// A machine without an OpenCL loader or platform still lists the built-in device.
pub fn list_devices() -> Result<Vec<DeviceInfo>> {
    let mut out = opencl::enumerate()
        .map(|v| v.into_iter().map(|(_, info)| info).collect())
        .unwrap_or_else(|e| {
            tracing::debug!("no OpenCL devices: {e}");
            Vec::new()
        });
    let idx = out.len();
    out.push(cpu::builtin_info(idx));
    Ok(out)
}

/// Whether at least one OpenCL device exists on this machine.
pub fn opencl_available() -> bool {
    opencl::enumerate().map(|v| !v.is_empty()).unwrap_or(false)
}

fn registry() -> &'static Mutex<HashMap<usize, Device>> {
    static REG: OnceLock<Mutex<HashMap<usize, Device>>> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Device {
    /// Selects a device by `selector`, or by `NETCL_DEVICE` when `selector` is `None`.
    ///
    /// A selector is an index into [`list_devices`], `gpu`, `cpu` (the first OpenCL CPU device), `builtin`
    /// (the built-in CPU device), `auto`, or a case-insensitive substring of the device or platform name.
    /// Without a selector: the first GPU, else the first OpenCL CPU device, else the built-in device.
    pub fn select(selector: Option<&str>) -> Result<Device> {
        let env = std::env::var("NETCL_DEVICE")
            .ok()
            .filter(|s| !s.trim().is_empty());
        let sel = selector
            .map(str::to_owned)
            .or(env)
            .unwrap_or_else(|| "auto".to_owned());
        let cl = opencl::enumerate().unwrap_or_default();
        let builtin_index = cl.len();
        let infos: Vec<DeviceInfo> = cl.iter().map(|(_, info)| info.clone()).collect();
        let index = resolve(&sel, &infos, builtin_index)?;
        let mut reg = registry()
            .lock()
            .map_err(|_| Error::Device("device registry poisoned".into()))?;
        if let Some(d) = reg.get(&index) {
            return Ok(d.clone());
        }
        let dev = if index == builtin_index {
            Device::from_backend(cpu::builtin_info(index), Box::new(cpu::CpuDevice::new()))
        } else {
            let (id, info) = cl[index].clone();
            let dev =
                Device::from_backend(info.clone(), Box::new(opencl::ClDevice::new(id, info)?));
            // Helpers start on the programs the device's tuning table lists (GPUs in background mode); the
            // check of which are on disk already runs beside the caller's first ops.
            let warm = dev.clone();
            let _ = std::thread::Builder::new()
                .name("netcl-warm-ahead".into())
                .spawn(move || crate::program::warm_ahead(&warm));
            dev
        };
        reg.insert(index, dev.clone());
        Ok(dev)
    }

    /// The built-in CPU device: plain Rust, the reference implementation of every op.
    pub fn builtin() -> Device {
        // The built-in device needs no driver, so selecting it cannot fail for a reason input controls.
        match Device::select(Some("builtin")) {
            Ok(d) => d,
            Err(_) => Device::from_backend(cpu::builtin_info(0), Box::new(cpu::CpuDevice::new())),
        }
    }
}

/// The index in `devices` (as [`list_devices`] returns them: the OpenCL devices, then the built-in one) that
/// `selector` names, by the rules of [`Device::select`], without opening a device.
pub fn resolve_selector(selector: &str, devices: &[DeviceInfo]) -> Result<usize> {
    let builtin_index = devices
        .len()
        .checked_sub(1)
        .ok_or_else(|| Error::Device("no devices to choose from".into()))?;
    resolve(selector, &devices[..builtin_index], builtin_index)
}

/// The index in [`list_devices`] that selector `sel` names; `cl` are the OpenCL devices.
fn resolve(sel: &str, cl: &[DeviceInfo], builtin_index: usize) -> Result<usize> {
    let s = sel.trim().to_ascii_lowercase();
    let first = |t: DeviceType| cl.iter().position(|i| i.kind == t);
    let missing = |what: &str| {
        Error::Device(format!(
            "selector `{sel}`: no OpenCL {what} on this machine ({})",
            summary(cl)
        ))
    };
    Ok(match s.as_str() {
        "auto" => first(DeviceType::Gpu)
            .or_else(|| first(DeviceType::Cpu))
            .or_else(|| (!cl.is_empty()).then_some(0))
            .unwrap_or(builtin_index),
        "gpu" => first(DeviceType::Gpu).ok_or_else(|| missing("GPU"))?,
        "cpu" => first(DeviceType::Cpu).ok_or_else(|| missing("CPU device"))?,
        "builtin" | "reference" => builtin_index,
        _ => {
            if let Ok(i) = s.parse::<usize>() {
                if i > builtin_index {
                    return Err(Error::Device(format!(
                        "selector `{sel}`: index {i} is out of range; devices are 0..={builtin_index} ({})",
                        summary(cl)
                    )));
                }
                i
            } else if let Some(i) = cl.iter().position(|i| {
                i.name.to_ascii_lowercase().contains(&s)
                    || i.platform.to_ascii_lowercase().contains(&s)
            }) {
                i
            } else if !s.is_empty() && "netcl built-in cpu".contains(&s) {
                builtin_index
            } else {
                return Err(Error::Device(format!(
                    "selector `{sel}` matches no device; use an index, gpu, cpu, builtin or a name substring ({})",
                    summary(cl)
                )));
            }
        }
    })
}

fn summary(cl: &[DeviceInfo]) -> String {
    if cl.is_empty() {
        return "no OpenCL devices found; the built-in device is `builtin`".into();
    }
    let names: Vec<String> = cl
        .iter()
        .map(|i| format!("{}: {} [{}]", i.index, i.name, i.kind))
        .collect();
    format!("available: {}; {}: built-in", names.join(", "), cl.len())
}
