//! The OpenCL backend: one context and one in-order, profiling-enabled queue per device.
//!
//! Buffers are raw `cl_mem` handles owned by [`ClMem`]; kernels come from the [`ProgramCache`]. Every launch
//! goes through [`ClDevice::launch`], which times it when the thread's timing scope asks
//! ([`crate::device::timing`]) and records it for the playground.

pub(crate) mod abi;
mod attention;
mod attention_layouts;
mod conv;
mod depthwise;
mod dropout;
pub(crate) mod elementwise;
mod fused;
mod gemm;
mod gemm_tc;
mod norm;
mod norm_back;
mod pool;
pub mod program;
mod reduce;
mod resize;
mod shape;
mod softmax;
mod unary;
mod update;
mod winograd;

use std::any::Any;
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

use crate::contract::Backend;
use crate::device::activity::{self, Activity};
use crate::device::timing::{self, LaunchEvent};
use crate::device::{DeviceInfo, DeviceType};
use crate::error::{ClContext, Error, Result};
use crate::memory::{Allocator, DeviceMem, Storage};
use abi::KernelArgs;
use program::{ArgBytes, ClKernel, Defines, ProgramCache};

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
                DeviceType::Gpu
            } else if ty & CL_DEVICE_TYPE_CPU != 0 {
                DeviceType::Cpu
            } else if ty & CL_DEVICE_TYPE_ACCELERATOR != 0 {
                DeviceType::Accelerator
            } else {
                DeviceType::Other
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
                kind,
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

impl DeviceMem for ClMem {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The `cl_mem` handle of OpenCL storage.
pub(crate) fn cl_mem(s: &Storage) -> Result<cl_mem> {
    s.device::<ClMem>().map(|m| m.mem)
}

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

/// A recorded launch's event, for the timing scope.
struct ClLaunchEvent(ClEvent);

// SAFETY: an OpenCL event handle may be waited on and queried from any thread (OpenCL 1.2 §A.2).
unsafe impl Send for ClLaunchEvent {}

impl LaunchEvent for ClLaunchEvent {
    fn span_ns(&self) -> Result<(u64, u64)> {
        self.0.wait().cl("clWaitForEvents")?;
        let s = self
            .0
            .profiling_command_start()
            .cl("clGetEventProfilingInfo")?;
        let e = self
            .0
            .profiling_command_end()
            .cl("clGetEventProfilingInfo")?;
        Ok((s, e))
    }
}

/// The event of one launch, kept only when the launch is timed: while the tuner measures candidates and
/// while launches are recorded ([`crate::device::timing::timed`]). On NVIDIA's OpenCL a launch that asks for
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
    /// Whether this is an NVIDIA GPU (see [`ClDevice::nvidia_gpu`]), read once from `info`.
    nvidia_gpu: bool,
    /// An NVIDIA GPU's compute capability major version (`cl_nv_device_attribute_query`); 0 elsewhere or
    /// when the driver does not say.
    nv_major: u32,
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
        let vendor = format!("{} {}", info.platform, info.vendor).to_ascii_lowercase();
        let nvidia_gpu = info.kind == DeviceType::Gpu && vendor.contains("nvidia");
        let nv_major = match nvidia_gpu {
            true => dev.compute_capability_major_nv().unwrap_or(0),
            false => 0,
        };
        Ok(ClDevice {
            info,
            nvidia_gpu,
            nv_major,
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

    /// Whether this is an NVIDIA GPU, whose OpenCL compiler takes inline PTX (the tensor-core kernels' `mma`,
    /// the warp shuffles of `GROUP_FOLD`).
    pub(crate) fn nvidia_gpu(&self) -> bool {
        self.nvidia_gpu
    }

    /// [`Backend::fill`](crate::contract::Backend::fill) with its event kept as a launch's is
    /// ([`Event`]): while the tuner measures, a candidate that clears its output first is timed with the
    /// clearing.
    pub(crate) fn fill_timed(
        &self,
        dst: &Storage,
        pattern: [u8; 4],
        bytes: usize,
    ) -> Result<Event> {
        let bytes = bytes / 4 * 4;
        if bytes == 0 {
            return Ok(Event(None));
        }
        // SAFETY: the pattern is copied by the runtime at enqueue time.
        let ev = unsafe {
            cl3::command_queue::enqueue_fill_buffer(
                self.queue.get(),
                cl_mem(dst)?,
                pattern.as_ptr() as *const c_void,
                4,
                0,
                bytes,
                0,
                ptr::null(),
            )
            .cl("clEnqueueFillBuffer")?
        };
        let ev = ClEvent::new(ev);
        Ok(Event(
            (timing::recording() || timing::measuring()).then_some(ev),
        ))
    }

    /// Whether kernels may copy global to local memory by `cp.async` (inline PTX): NVIDIA GPUs of compute
    /// capability 8.0 or more.
    pub(crate) fn async_copies(&self) -> bool {
        self.nvidia_gpu && self.nv_major >= 8
    }

    /// Whether a kernel whose work-groups of `local` items fold (`GROUP_FOLD` in `kernels/prelude.cl`) folds
    /// by warp shuffles: on NVIDIA GPUs, where every warp of the group is whole.
    pub(crate) fn fold_shuffles(&self, local: usize) -> bool {
        self.nvidia_gpu() && local.is_multiple_of(32)
    }

    /// `defines` with `NCL_SHFL=1` added where [`Self::fold_shuffles`] says so for work-groups of `local`
    /// items (elsewhere unchanged: the prelude's default is the local-memory fold).
    pub(crate) fn fold_defines(&self, defines: Defines, local: usize) -> Defines {
        match self.fold_shuffles(local) {
            true => defines.set("NCL_SHFL", 1),
            false => defines,
        }
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
        key: program::QuickKey,
        defines: impl FnOnce() -> Defines,
    ) -> Result<Arc<ClKernel>> {
        self.programs
            .kernel_by(&self.context, self.device.id(), key, defines)
    }

    /// Enqueues `kernel` with the arguments of its generated struct (see [`abi`]); an error names both kernels
    /// when `args` belong to another kernel than `kernel`.
    pub(crate) fn run<'a, A: KernelArgs<'a>>(
        &self,
        kernel: &ClKernel,
        args: &A,
        global: &[usize],
        local: Option<&[usize]>,
    ) -> Result<Event> {
        if !A::KERNELS.contains(&kernel.name.as_str()) {
            return Err(Error::Invalid(format!(
                "kernel `{}` launched with the arguments of {} {:?}",
                kernel.name,
                A::FAMILY,
                A::KERNELS
            )));
        }
        self.launch(kernel, args.list().as_ref(), global, local)
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
                        let m = cl_mem(s)?;
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
            r.map_err(|code| Error::OpenCl {
                call: "clSetKernelArg",
                code,
                name: cl3::error_codes::error_text(code),
                context: Some(format!("for argument {i} of kernel `{}`", kernel.name)),
            })?;
            slot.values[i] = bytes;
        }
        // A CPU driver compiles a kernel for each new work-group size at its first launch: that launch runs
        // alone and is timed as compile time.
        let first_launch = self.info.kind == DeviceType::Cpu && {
            let mut key = [0usize; 3];
            for (i, v) in local.unwrap_or(&global).iter().take(3).enumerate() {
                key[i] = *v;
            }
            // Global sizes stand for the work-group the driver picks; a local size is marked apart from them.
            key[2] |= usize::from(local.is_some()) << (usize::BITS - 1);
            // Bounded: a kernel launched at ever new global sizes stops being watched (and its list scanned) once
            // it has seen LAUNCH_SIZES_WATCHED of them; later first launches then count as running time.
            slot.launched.len() < LAUNCH_SIZES_WATCHED && !slot.launched.contains(&key) && {
                slot.launched.push(key);
                true
            }
        };
        let compile_started = if first_launch {
            activity::report(&Activity::Preparing {
                kernel: &kernel.name,
            });
            self.queue.finish().cl("clFinish")?;
            Some(std::time::Instant::now())
        } else {
            None
        };
        let recording = timing::recording();
        let timed = recording || timing::measuring();
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
        if let Some(t0) = compile_started {
            self.queue.finish().cl("clFinish")?;
            program::add_first_launch(t0.elapsed().as_micros() as u64);
        }
        drop(guard);
        let ev = (!ev.is_null()).then_some(ev);
        let Some(ev) = ev else {
            return Ok(Event(None));
        };
        let event = ClEvent::new(ev);
        if recording {
            // SAFETY: retaining the event gives the recorder its own reference.
            unsafe {
                let _ = cl3::event::retain_event(ev);
            }
            timing::record(
                &kernel.name,
                &global,
                local,
                Box::new(ClLaunchEvent(ClEvent::new(ev))),
            );
        }
        Ok(Event(Some(event)))
    }
}

/// How many work sizes per kernel a CPU device times as first launches (see `ClDevice::launch`).
const LAUNCH_SIZES_WATCHED: usize = 32;

#[cfg(test)]
mod launch_tests;

impl Error {
    /// The launch's kernel and work sizes added to an OpenCL failure; the variant and its code stay.
    fn with_context(self, kernel: &str, global: &[usize], local: Option<&[usize]>) -> Error {
        match self {
            Error::OpenCl {
                call, code, name, ..
            } => Error::OpenCl {
                call,
                code,
                name,
                context: Some(format!(
                    "for kernel `{kernel}`, global {global:?}, local {local:?}"
                )),
            },
            e => e,
        }
    }
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

impl Allocator for ClDevice {
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
        Ok(Storage::Device(Box::new(ClMem { mem })))
    }
}

impl Backend for ClDevice {
    fn write(&self, dst: &Storage, offset: usize, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the write is blocking, so `data` is read before this returns (no aliasing of freed memory).
        unsafe {
            let ev = cl3::command_queue::enqueue_write_buffer(
                self.queue.get(),
                cl_mem(dst)?,
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
        crate::device::timing::count_host_read();
        // SAFETY: the read is blocking, so `out` is filled before this returns.
        unsafe {
            let ev = cl3::command_queue::enqueue_read_buffer(
                self.queue.get(),
                cl_mem(src)?,
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
        self.fill_timed(dst, pattern, bytes).map(drop)
    }

    fn copy(&self, src: &Storage, dst: &Storage, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: both handles are live buffers of at least `bytes` bytes.
        unsafe {
            let ev = cl3::command_queue::enqueue_copy_buffer(
                self.queue.get(),
                cl_mem(src)?,
                cl_mem(dst)?,
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

    fn as_any(&self) -> &dyn Any {
        self
    }
}
