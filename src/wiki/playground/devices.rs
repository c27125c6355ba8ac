//! The devices the playground runs on: every device the server lists (its OpenCL devices, then the built-in
//! reference device), the one a run uses when it names none, and how a run's `device` field is read.

use serde_json::{Value, json};

use crate::device::DeviceInfo;

/// Longest `device` selector a run may send.
pub const MAX_SELECTOR_BYTES: usize = 128;

/// The server's devices, as the playground offers them.
#[derive(Debug, Clone)]
pub struct PlaygroundDevices {
    /// In `netcl devices` order: the OpenCL devices, then the built-in device.
    pub devices: Vec<DeviceInfo>,
    /// The index runs use when they name no device (the server's `--device`, else `NETCL_DEVICE`, else the
    /// default choice), or why that selection names no device.
    pub default: std::result::Result<usize, String>,
}

impl PlaygroundDevices {
    /// Lists the devices and resolves the server's selection among them. Touches the OpenCL driver: call it
    /// off the async threads.
    pub fn load(selection: Option<&str>) -> std::result::Result<PlaygroundDevices, String> {
        let devices = crate::list_devices().map_err(|e| e.to_string())?;
        let selector = selection
            .map(str::to_owned)
            .or_else(|| std::env::var("NETCL_DEVICE").ok())
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| "auto".into());
        let default = crate::resolve_selector(&selector, &devices).map_err(|e| e.to_string());
        Ok(PlaygroundDevices { devices, default })
    }

    /// The index `selector` (an index, `gpu`, `cpu`, `builtin` or a name substring, as `netcl devices` prints
    /// them) names, or a message naming the choices.
    pub fn resolve(&self, selector: &str) -> std::result::Result<usize, String> {
        if selector.len() > MAX_SELECTOR_BYTES {
            return Err(format!(
                "the device selector is {} bytes; at most {MAX_SELECTOR_BYTES} are read",
                selector.len()
            ));
        }
        if selector.trim().is_empty() {
            return Err(format!(
                "the device selector is empty; choose one of {}",
                self.choices_text()
            ));
        }
        crate::resolve_selector(selector, &self.devices).map_err(|e| e.to_string())
    }

    /// Whether runs on `index` go to the default workers.
    pub fn is_default(&self, index: usize) -> bool {
        self.default.as_ref().is_ok_and(|d| *d == index)
    }

    /// `[{"index", "name", "kind", "platform"}…]`: what a client shows to choose from.
    pub fn choices(&self) -> Value {
        Value::Array(
            self.devices
                .iter()
                .map(|d| {
                    json!({
                        "index": d.index,
                        "name": d.name,
                        "kind": d.kind.to_string(),
                        "platform": d.platform,
                        "default": self.is_default(d.index),
                    })
                })
                .collect(),
        )
    }

    fn choices_text(&self) -> String {
        self.devices
            .iter()
            .map(|d| format!("{}: {} [{}]", d.index, d.name, d.kind))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The answer of `GET /api/run/devices`.
    pub fn to_json(&self) -> Value {
        json!({
            "default": self.default.as_ref().ok(),
            "default_error": self.default.as_ref().err(),
            "devices": self.choices(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceType;

    fn info(index: usize, name: &str, kind: DeviceType) -> DeviceInfo {
        DeviceInfo {
            index,
            platform: "Test".into(),
            name: name.into(),
            vendor: String::new(),
            driver: String::new(),
            version: String::new(),
            opencl_c_version: String::new(),
            kind,
            compute_units: 1,
            max_clock_mhz: 0,
            global_mem_bytes: 0,
            local_mem_bytes: 0,
            local_mem_dedicated: false,
            max_alloc_bytes: 0,
            max_work_group_size: 1,
            max_work_item_sizes: vec![1],
            fp16: false,
            fp64: false,
            unified_memory: true,
        }
    }

    fn two() -> PlaygroundDevices {
        PlaygroundDevices {
            devices: vec![
                info(0, "pthread-haswell", DeviceType::Cpu),
                info(1, "netcl built-in CPU", DeviceType::Builtin),
            ],
            default: Ok(0),
        }
    }

    #[test]
    fn selectors_resolve_like_the_command_line() {
        let d = two();
        assert_eq!(d.resolve("0"), Ok(0));
        assert_eq!(d.resolve("1"), Ok(1));
        assert_eq!(d.resolve("cpu"), Ok(0));
        assert_eq!(d.resolve("builtin"), Ok(1));
        assert_eq!(d.resolve("HASWELL"), Ok(0));
        assert!(d.is_default(0) && !d.is_default(1));
    }

    #[test]
    fn unknown_selectors_name_the_choices() {
        let d = two();
        let e = d.resolve("7").unwrap_err();
        assert!(
            e.contains("out of range") && e.contains("pthread-haswell"),
            "{e}"
        );
        let e = d.resolve("gpu").unwrap_err();
        assert!(e.contains("no OpenCL GPU"), "{e}");
        let e = d.resolve(" ").unwrap_err();
        assert!(
            e.contains("empty") && e.contains("1: netcl built-in CPU"),
            "{e}"
        );
        assert!(
            d.resolve(&"x".repeat(200))
                .unwrap_err()
                .contains("200 bytes")
        );
    }
}
