//! What the engine is busy with beyond running kernels: building programs and measuring tuning candidates.
//!
//! A first call can spend seconds compiling kernels or timing candidates before its answer. A caller that
//! wants to show this (the playground streams it as "building kernels" / "measuring candidates") installs an
//! observer for its thread with [`observe`]; the program cache and the tuner [`report`] to it. Without an
//! observer a report costs one thread-local read.

use std::cell::RefCell;

/// One step of the engine's own work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity<'a> {
    /// A program is about to be compiled (or loaded from the binary cache): kernel `kernel` of family
    /// `family`; `batch` programs are built together (1 when built on first use).
    Building {
        family: &'a str,
        kernel: &'a str,
        batch: usize,
    },
    /// Kernel `kernel` is about to be launched at a work-group size it has not run with before, on a device
    /// whose driver compiles each kernel once per work-group size (CPU OpenCL).
    Preparing { kernel: &'a str },
    /// Candidate `index` (from 1) of `of` for op `op` is about to be timed.
    Measuring {
        op: &'a str,
        candidate: &'a str,
        index: usize,
        of: usize,
    },
}

type Observer = Box<dyn FnMut(&Activity<'_>)>;

thread_local! {
    static OBSERVER: RefCell<Option<Observer>> = const { RefCell::new(None) };
}

/// Restores the thread's previous observer when dropped.
pub struct ObserverGuard {
    previous: Option<Observer>,
}

impl Drop for ObserverGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        OBSERVER.with(|o| *o.borrow_mut() = previous);
    }
}

/// Calls `f` with every [`Activity`] this thread reports until the guard is dropped.
pub fn observe(f: impl FnMut(&Activity<'_>) + 'static) -> ObserverGuard {
    let previous = OBSERVER.with(|o| o.borrow_mut().replace(Box::new(f)));
    ObserverGuard { previous }
}

/// Tells this thread's observer, if any, about `a`. An observer that reports in turn is not called again.
pub fn report(a: &Activity<'_>) {
    let taken = OBSERVER.with(|o| o.try_borrow_mut().ok().and_then(|mut o| o.take()));
    if let Some(mut f) = taken {
        f(a);
        OBSERVER.with(|o| {
            if let Ok(mut slot) = o.try_borrow_mut()
                && slot.is_none()
            {
                *slot = Some(f);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn an_observer_sees_reports_until_its_guard_drops() {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let s = seen.clone();
        let guard = observe(move |a| {
            if let Activity::Building { kernel, .. } = a {
                s.borrow_mut().push(kernel.to_string());
            }
        });
        report(&Activity::Building {
            family: "gemm",
            kernel: "gemm_packed",
            batch: 1,
        });
        drop(guard);
        report(&Activity::Building {
            family: "gemm",
            kernel: "gemm_reg",
            batch: 1,
        });
        assert_eq!(*seen.borrow(), vec!["gemm_packed".to_string()]);
    }
}
