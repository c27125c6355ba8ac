//! The OpenCL device kind: one context and one in-order, profiling-enabled queue per device.
//!
//! Buffers are raw `cl_mem` handles owned by [`ClMem`]; kernels come from the [`ProgramCache`]. Every launch
//! goes through [`ClDevice::launch`], which can record it with its device time for the playground.

use std::cell::RefCell;
use std::ffi::c_void;
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use opencl3::command_queue::{CL_QUEUE_PROFILING_ENABLE, CommandQueue};
use opencl3::context::Context;
use opencl3::device::{
    CL_DEVICE_TYPE_ACCELERATOR, CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU,
    CL_LOCAL, Device as ClDeviceId,
};
use opencl3::event::Event as ClEvent;
use opencl3::memory::CL_MEM_READ_WRITE;
use opencl3::platform::get_platforms;
use opencl3::types::{
    CL_BLOCKING, cl_command_queue, cl_device_id, cl_event, cl_int, cl_kernel, cl_mem, cl_uint,
};

use super::{DeviceInfo, DeviceKind, Launch};
use crate::error::{ClContext, Error, Result};
use crate::memory::Storage;
use crate::program::{ArgBytes, ClKernel, Defines, ProgramCache};

/// Every OpenCL device of every platform, in platform order.
///
/// Enumerated once per process: some drivers (PoCL among them) are not safe to initialise from several threads
/// at once, and the set of devices does not change while a process runs.
pub(crate) fn enumerate() -> Result<Vec<(cl_device_id, DeviceInfo)>> {
    static DEVICES: OnceLock<std::result::Result<Vec<(ClDeviceId, DeviceInfo)>, i32>> =
        OnceLock::new();
    match DEVICES.get_or_init(|| {
        scan().map_err(|e| match e {
            Error::OpenCl { code, .. } => code,
            _ => -1001,
        })
    }) {
        Ok(list) => Ok(list.iter().map(|(d, i)| (d.id(), i.clone())).collect()),
        Err(code) => Err(Error::cl("clGetPlatformIDs", *code)),
    }
}

fn scan() -> Result<Vec<(ClDeviceId, DeviceInfo)>> {
    let platforms = get_platforms().cl("clGetPlatformIDs")?;
    let mut out = Vec::new();
    for p in platforms {
        let pname = p.name().unwrap_or_default();
        let ids = match p.get_devices(CL_DEVICE_TYPE_ALL) {
            Ok(ids) => ids,
            Err(_) => continue,
        };
        for id in ids {
            let d = ClDeviceId::new(id);
            let ty = d.dev_type().unwrap_or(0);
            let kind = if ty & CL_DEVICE_TYPE_GPU != 0 {
                "gpu"
            } else if ty & CL_DEVICE_TYPE_CPU != 0 {
                "cpu"
            } else if ty & CL_DEVICE_TYPE_ACCELERATOR != 0 {
                "accelerator"
            } else {
                "other"
            };
            let ext = d.extensions().unwrap_or_default();
            let info = DeviceInfo {
                index: out.len(),
                platform: pname.trim().to_owned(),
                name: d.name().unwrap_or_default().trim().to_owned(),
                vendor: d.vendor().unwrap_or_default().trim().to_owned(),
                driver: d.driver_version().unwrap_or_default().trim().to_owned(),
                version: d.version().unwrap_or_default().trim().to_owned(),
                opencl_c_version: d.opencl_c_version().unwrap_or_default().trim().to_owned(),
                kind: kind.to_owned(),
                compute_units: d.max_compute_units().unwrap_or(0),
                max_clock_mhz: d.max_clock_frequency().unwrap_or(0),
                global_mem_bytes: d.global_mem_size().unwrap_or(0),
                local_mem_bytes: d.local_mem_size().unwrap_or(0),
                local_mem_dedicated: d.local_mem_type().is_ok_and(|t| t == CL_LOCAL),
                max_alloc_bytes: d.max_mem_alloc_size().unwrap_or(0),
                max_work_group_size: d.max_work_group_size().unwrap_or(1),
                max_work_item_sizes: d.max_work_item_sizes().unwrap_or_default(),
                fp16: ext.contains("cl_khr_fp16"),
                fp64: ext.contains("cl_khr_fp64"),
                unified_memory: d.host_unified_memory().unwrap_or(false),
            };
            out.push((d, info));
        }
    }
    Ok(out)
}

/// A device buffer; released when dropped.
pub(crate) struct ClMem {
    pub(crate) mem: cl_mem,
}

// SAFETY: a cl_mem handle may be used from any thread; OpenCL objects are reference counted and thread-safe
// (OpenCL 1.2 §A.2), and netcl only enqueues on the device's one in-order queue.
unsafe impl Send for ClMem {}
unsafe impl Sync for ClMem {}

impl Drop for ClMem {
    fn drop(&mut self) {
        // SAFETY: `mem` was created by clCreateBuffer and is released exactly once here; queued commands that
        // still use it hold their own reference inside the runtime.
        unsafe {
            let _ = cl3::memory::release_mem_object(self.mem);
        }
    }
}

/// A kernel argument.
#[derive(Clone, Copy)]
pub(crate) enum Arg<'a> {
    /// A device buffer.
    Mem(&'a Storage),
    I32(i32),
    U32(u32),
    F32(f32),
    /// Eight ints passed by value as an `int8` (shapes and strides, never uploaded).
    I32x8([i32; 8]),
    /// A `__local` buffer of this many bytes.
    Local(usize),
}

impl Arg<'_> {
    /// The bytes a by-value argument is set from, or the size of a local buffer (`None` for a buffer).
    fn bytes(&self) -> Option<ArgBytes> {
        let value = |b: &[u8]| {
            let mut v = [0u8; 32];
            v[..b.len()].copy_from_slice(b);
            Some(ArgBytes::Value(b.len() as u8, v))
        };
        match self {
            Arg::Mem(_) => None,
            Arg::I32(v) => value(&v.to_ne_bytes()),
            Arg::U32(v) => value(&v.to_ne_bytes()),
            Arg::F32(v) => value(&v.to_ne_bytes()),
            Arg::I32x8(v) => {
                let mut b = [0u8; 32];
                for (c, x) in b.chunks_exact_mut(4).zip(v) {
                    c.copy_from_slice(&x.to_ne_bytes());
                }
                Some(ArgBytes::Value(32, b))
            }
            Arg::Local(n) => Some(ArgBytes::Local(*n)),
        }
    }
}

struct Recorded {
    kernel: String,
    global: Vec<usize>,
    local: Option<Vec<usize>>,
    event: ClEvent,
}

/// The event of one launch, kept only when the launch is timed: while the autotuner measures candidates
/// ([`crate::autotune::measuring`]) and while launches are recorded. On NVIDIA's OpenCL a launch that asks for
/// an event on a profiling queue takes about twice as long to enqueue (13–15 µs against 6–7 µs per launch,
/// measured on an H200), so untimed launches ask for none.
pub(crate) struct Event(Option<ClEvent>);

/// `clEnqueueNDRangeKernel` as the ICD loader exports it: the wrapper crate's function always asks for an
/// event, and untimed launches ask for none.
type EnqueueNdRange = unsafe extern "C" fn(
    cl_command_queue,
    cl_kernel,
    cl_uint,
    *const usize,
    *const usize,
    *const usize,
    cl_uint,
    *const cl_event,
    *mut cl_event,
) -> cl_int;

/// The loader's `clEnqueueNDRangeKernel`, from the library the wrapper crate loads (`OPENCL_DYLIB_PATH`, else
/// `libOpenCL.so.1`); `None` where it cannot be found.
fn enqueue_nd_range() -> Option<EnqueueNdRange> {
    static F: OnceLock<Option<EnqueueNdRange>> = OnceLock::new();
    *F.get_or_init(|| {
        let path = std::env::var("OPENCL_DYLIB_PATH").unwrap_or_else(|_| "libOpenCL.so.1".into());
        let path = std::ffi::CString::new(path).ok()?;
        // SAFETY: dlopen and dlsym get valid C strings; the library stays loaded for the process (it is
        // never closed), so the function pointer stays valid. The symbol has the OpenCL 1.0 signature above.
        unsafe {
            let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if h.is_null() {
                return None;
            }
            let f = libc::dlsym(h, c"clEnqueueNDRangeKernel".as_ptr());
            (!f.is_null()).then(|| std::mem::transmute::<*mut c_void, EnqueueNdRange>(f))
        }
    })
}

/// One OpenCL device with its context, queue and kernel cache.
pub(crate) struct ClDevice {
    pub(crate) info: DeviceInfo,
    pub(crate) device: ClDeviceId,
    pub(crate) context: Context,
    pub(crate) queue: CommandQueue,
    programs: ProgramCache,
    /// Zeroed int counters for kernels that coordinate their work-groups within one launch; such a kernel
    /// leaves them zeroed when it ends. Grown (and zeroed once) on demand.
    counters: Mutex<Option<(Storage, usize)>>,
}

impl ClDevice {
    pub(crate) fn new(id: cl_device_id, info: DeviceInfo) -> Result<Self> {
        let dev = ClDeviceId::new(id);
        let context = Context::from_device(&dev).cl("clCreateContext")?;
        #[allow(deprecated)]
        let queue = CommandQueue::create_default(&context, CL_QUEUE_PROFILING_ENABLE)
            .cl("clCreateCommandQueue")?;
        Ok(ClDevice {
            info,
            device: dev,
            context,
            queue,
            programs: ProgramCache::default(),
            counters: Mutex::new(None),
        })
    }

    /// At least `ints` zeroed int counters (see the field). Hold the guard while enqueueing the kernel that uses
    /// them; the queue is in order, so the next user sees them zeroed again.
    pub(crate) fn counters(&self, ints: usize) -> Result<MutexGuard<'_, Option<(Storage, usize)>>> {
        let mut g = self
            .counters
            .lock()
            .map_err(|_| Error::Invalid("counter buffer lock poisoned".into()))?;
        if g.as_ref().is_none_or(|(_, n)| *n < ints) {
            let n = ints.next_power_of_two().max(64);
            let st = self.alloc(n * 4)?;
            self.fill(&st, [0; 4], n * 4)?;
            *g = Some((st, n));
        }
        Ok(g)
    }

    /// The kernel `name` from kernel family `source`, built with `defines` (once per combination).
    pub(crate) fn kernel(
        &self,
        source: &str,
        defines: &Defines,
        name: &str,
    ) -> Result<Arc<ClKernel>> {
        self.programs
            .kernel(&self.context, self.device.id(), source, defines, name)
    }

    /// As [`ClDevice::kernel`], found by a compact key on later calls; see [`ProgramCache::kernel_by`].
    pub(crate) fn kernel_by(
        &self,
        key: crate::program::QuickKey,
        defines: impl FnOnce() -> Defines,
    ) -> Result<Arc<ClKernel>> {
        self.programs
            .kernel_by(&self.context, self.device.id(), key, defines)
    }

    /// Enqueues `kernel` over `global` work-items (rounded up to `local` when given) with `args`.
    pub(crate) fn launch(
        &self,
        kernel: &ClKernel,
        args: &[Arg<'_>],
        global: &[usize],
        local: Option<&[usize]>,
    ) -> Result<Event> {
        let global: Vec<usize> = match local {
            Some(l) => global
                .iter()
                .zip(l)
                .map(|(g, l)| g.div_ceil(*l).max(1) * l)
                .collect(),
            None => global.iter().map(|g| (*g).max(1)).collect(),
        };
        let mut guard = kernel.lock()?;
        let slot = &mut *guard;
        let k = slot.kernel.get();
        if slot.values.len() < args.len() {
            slot.values.resize(args.len(), None);
        }
        for (i, a) in args.iter().enumerate() {
            let bytes = a.bytes();
            if bytes.is_some() && slot.values[i] == bytes {
                continue;
            }
            let idx = i as u32;
            // SAFETY: each value pointer is valid for the size passed, and OpenCL copies argument values at
            // clSetKernelArg time; the kernel object is locked so no other thread changes its arguments.
            let r = unsafe {
                match (a, &bytes) {
                    (Arg::Mem(s), _) => {
                        let m = s.cl_mem()?;
                        cl3::kernel::set_kernel_arg(
                            k,
                            idx,
                            size_of::<cl_mem>(),
                            &m as *const cl_mem as *const c_void,
                        )
                    }
                    (Arg::Local(n), _) => {
                        cl3::kernel::set_kernel_arg(k, idx, (*n).max(4), ptr::null())
                    }
                    (_, Some(ArgBytes::Value(len, b))) => cl3::kernel::set_kernel_arg(
                        k,
                        idx,
                        *len as usize,
                        b.as_ptr() as *const c_void,
                    ),
                    _ => unreachable!("every by-value argument has bytes"),
                }
            };
            // A failed set leaves the argument unknown.
            slot.values[i] = None;
            r.map_err(|code| {
                Error::Invalid(format!(
                    "kernel `{}` argument {i}: {}",
                    kernel.name,
                    cl3::error_codes::error_text(code)
                ))
            })?;
            slot.values[i] = bytes;
        }
        let recording = RECORDING.with(|rec| rec.borrow().is_some());
        let timed = recording || crate::autotune::measuring();
        let enqueue = enqueue_nd_range().ok_or_else(|| {
            Error::Unsupported("the OpenCL library exports no clEnqueueNDRangeKernel".into())
        })?;
        let mut ev: cl_event = ptr::null_mut();
        // SAFETY: the work sizes outlive the call and every argument has been set above; a null event pointer
        // asks for no event, otherwise the returned event is owned below.
        let code = unsafe {
            enqueue(
                self.queue.get(),
                k,
                global.len() as u32,
                ptr::null(),
                global.as_ptr(),
                local.map_or(ptr::null(), |l| l.as_ptr()),
                0,
                ptr::null(),
                if timed { &mut ev } else { ptr::null_mut() },
            )
        };
        if code != 0 {
            return Err(Error::cl("clEnqueueNDRangeKernel", code).with_context(
                &kernel.name,
                &global,
                local,
            ));
        }
        drop(guard);
        let ev = (!ev.is_null()).then_some(ev);
        let Some(ev) = ev else {
            return Ok(Event(None));
        };
        let event = ClEvent::new(ev);
        if recording {
            RECORDING.with(|rec| {
                if let Some(list) = rec.borrow_mut().as_mut() {
                    // SAFETY: retaining the event gives the recorder its own reference.
                    unsafe {
                        let _ = cl3::event::retain_event(ev);
                    }
                    list.push(Recorded {
                        kernel: kernel.name.clone(),
                        global: global.clone(),
                        local: local.map(<[usize]>::to_vec),
                        event: ClEvent::new(ev),
                    });
                }
            });
        }
        Ok(Event(Some(event)))
    }
}

thread_local! {
    /// Launches recorded on this thread, when recording is on. Per thread, so concurrent runs (the playground's
    /// jobs, parallel tests) each see only their own launches.
    static RECORDING: RefCell<Option<Vec<Recorded>>> = const { RefCell::new(None) };
}

/// Turns recording of this thread's kernel launches on or off (off discards what was recorded).
pub(crate) fn record_launches(on: bool) {
    RECORDING.with(|rec| {
        let mut rec = rec.borrow_mut();
        *rec = if on {
            Some(rec.take().unwrap_or_default())
        } else {
            None
        };
    });
}

/// Returns and clears this thread's recorded launches, waiting for each to finish to read its device time.
pub(crate) fn take_launches() -> Vec<Launch> {
    let list = RECORDING.with(|rec| {
        rec.borrow_mut()
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    });
    list.into_iter()
        .map(|r| Launch {
            ms: event_ms(&r.event).unwrap_or(0.0),
            kernel: r.kernel,
            global: r.global,
            local: r.local,
        })
        .collect()
}

/// Returns and clears this thread's recorded launches as one span of device time: from the start of the first
/// launch to the end of the last, in milliseconds, after waiting for them (`None` when nothing was launched).
pub(crate) fn take_launch_span_ms() -> Result<Option<f64>> {
    let list = RECORDING.with(|rec| {
        rec.borrow_mut()
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    });
    let (mut start, mut end) = (u64::MAX, 0u64);
    for r in &list {
        r.event.wait().cl("clWaitForEvents")?;
        start = start.min(
            r.event
                .profiling_command_start()
                .cl("clGetEventProfilingInfo")?,
        );
        end = end.max(
            r.event
                .profiling_command_end()
                .cl("clGetEventProfilingInfo")?,
        );
    }
    Ok((!list.is_empty()).then(|| end.saturating_sub(start) as f64 / 1e6))
}

impl Error {
    fn with_context(self, kernel: &str, global: &[usize], local: Option<&[usize]>) -> Error {
        match self {
            Error::OpenCl { call, code, name } => Error::Invalid(format!(
                "{call} failed with {name} ({code}) for kernel `{kernel}`, global {global:?}, local {local:?}"
            )),
            e => e,
        }
    }
}

/// Device time of one event in milliseconds, after waiting for it.
fn event_ms(ev: &ClEvent) -> Result<f64> {
    ev.wait().cl("clWaitForEvents")?;
    let s = ev.profiling_command_start().cl("clGetEventProfilingInfo")?;
    let e = ev.profiling_command_end().cl("clGetEventProfilingInfo")?;
    Ok(e.saturating_sub(s) as f64 / 1e6)
}

/// Device time from the start of the first to the end of the last launch, in milliseconds. The launches must
/// have been timed (made while the autotuner measures or while launches are recorded).
pub(crate) fn events_ms(evs: &[Event]) -> Result<f64> {
    let (Some(first), Some(last)) = (evs.first(), evs.last()) else {
        return Ok(0.0);
    };
    let (Some(first), Some(last)) = (&first.0, &last.0) else {
        return Err(Error::Invalid(
            "a launch was not timed: events are kept only while the autotuner measures or launches are recorded"
                .into(),
        ));
    };
    last.wait().cl("clWaitForEvents")?;
    let s = first
        .profiling_command_start()
        .cl("clGetEventProfilingInfo")?;
    let e = last.profiling_command_end().cl("clGetEventProfilingInfo")?;
    Ok(e.saturating_sub(s) as f64 / 1e6)
}

impl DeviceKind for ClDevice {
    fn alloc(&self, bytes: usize) -> Result<Storage> {
        if bytes as u64 > self.info.max_alloc_bytes && self.info.max_alloc_bytes > 0 {
            return Err(Error::Limit(format!(
                "allocation of {bytes} bytes exceeds the device's largest allocation of {} bytes ({})",
                self.info.max_alloc_bytes, self.info.name
            )));
        }
        // SAFETY: no host pointer is passed; the returned handle is owned by ClMem.
        let mem = unsafe {
            cl3::memory::create_buffer(
                self.context.get(),
                CL_MEM_READ_WRITE,
                bytes.max(4),
                ptr::null_mut(),
            )
        }
        .map_err(|code| match code {
            -4 | -61 => Error::Limit(format!(
                "the device could not allocate {bytes} bytes ({}: {})",
                self.info.name,
                cl3::error_codes::error_text(code)
            )),
            c => Error::cl("clCreateBuffer", c),
        })?;
        Ok(Storage::Cl(ClMem { mem }))
    }

    fn write(&self, dst: &Storage, offset: usize, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the write is blocking, so `data` is read before this returns (no aliasing of freed memory).
        unsafe {
            let ev = cl3::command_queue::enqueue_write_buffer(
                self.queue.get(),
                dst.cl_mem()?,
                CL_BLOCKING,
                offset,
                data.len(),
                data.as_ptr() as *const c_void,
                0,
                ptr::null(),
            )
            .cl("clEnqueueWriteBuffer")?;
            drop(ClEvent::new(ev));
        }
        Ok(())
    }

    fn read(&self, src: &Storage, offset: usize, out: &mut [u8]) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: the read is blocking, so `out` is filled before this returns.
        unsafe {
            let ev = cl3::command_queue::enqueue_read_buffer(
                self.queue.get(),
                src.cl_mem()?,
                CL_BLOCKING,
                offset,
                out.len(),
                out.as_mut_ptr() as *mut c_void,
                0,
                ptr::null(),
            )
            .cl("clEnqueueReadBuffer")?;
            drop(ClEvent::new(ev));
        }
        Ok(())
    }

    fn fill(&self, dst: &Storage, pattern: [u8; 4], bytes: usize) -> Result<()> {
        let bytes = bytes / 4 * 4;
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: the pattern is copied by the runtime at enqueue time.
        unsafe {
            let ev = cl3::command_queue::enqueue_fill_buffer(
                self.queue.get(),
                dst.cl_mem()?,
                pattern.as_ptr() as *const c_void,
                4,
                0,
                bytes,
                0,
                ptr::null(),
            )
            .cl("clEnqueueFillBuffer")?;
            drop(ClEvent::new(ev));
        }
        Ok(())
    }

    fn copy(&self, src: &Storage, dst: &Storage, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: both handles are live buffers of at least `bytes` bytes.
        unsafe {
            let ev = cl3::command_queue::enqueue_copy_buffer(
                self.queue.get(),
                src.cl_mem()?,
                dst.cl_mem()?,
                0,
                0,
                bytes,
                0,
                ptr::null(),
            )
            .cl("clEnqueueCopyBuffer")?;
            drop(ClEvent::new(ev));
        }
        Ok(())
    }

    fn finish(&self) -> Result<()> {
        self.queue.finish().cl("clFinish")
    }

    fn as_cl(&self) -> Option<&ClDevice> {
        Some(self)
    }
}
