//! `netcl worker`: runs playground jobs for a server, one JSON object per line over stdin/stdout.
//!
//! Request: `{"id": "…", "code": "…", "limits": {…}}` (limits optional). Replies, on stdout:
//! `{"id": "…", "event": "progress", "data": …}` for each `progress(…)` call of the script, then
//! `{"id": "…", "event": "result", "result": RunResult}`. A line that is not a request gets
//! `{"id": null, "event": "error", "message": …}`. The device stays open between jobs, so kernel builds and
//! autotune decisions are reused. The worker exits when stdin closes.

use std::io::{BufRead, Write};

use serde::Deserialize;

use super::{Limits, run_with_progress};
use crate::device::Device;
use crate::error::{Error, Result};

#[derive(Deserialize)]
struct Request {
    id: serde_json::Value,
    code: String,
    #[serde(default)]
    limits: Option<Limits>,
}

fn emit(line: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, line);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

/// Serves jobs from stdin until it closes.
pub fn serve(device: &Device) -> Result<()> {
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| Error::io("<stdin>", e))?;
        if line.trim().is_empty() {
            continue;
        }
        let req: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                emit(
                    &serde_json::json!({"id": null, "event": "error", "message": format!("bad request: {e}")}),
                );
                continue;
            }
        };
        let id = req.id.clone();
        let progress_id = id.clone();
        let limits = req.limits.unwrap_or_default();
        let result = run_with_progress(
            device,
            &req.code,
            &limits,
            Box::new(move |data| {
                emit(&serde_json::json!({"id": progress_id, "event": "progress", "data": data}))
            }),
        );
        emit(&serde_json::json!({"id": id, "event": "result", "result": result}));
    }
    Ok(())
}
