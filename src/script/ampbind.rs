//! Playground bindings of mixed precision: `autocast(on)` turns the dtype policy on or off for the rest of the
//! run (it ends with the run), and `grad_scaler(init_scale)` makes a GradScaler with netcl's other defaults
//! (`scale(loss)`, `step(opt)`, `update()`, `get_scale()`).

use std::cell::RefCell;
use std::rc::Rc;

use rhai::{Dynamic, Engine, FLOAT};

use super::bindings::{R, float_arg, track_var};
use super::nnbind::Opt;
use super::{Shared, engine_err};
use crate::autograd::Var;
use crate::ops::policy::{AutocastGuard, autocast};
use crate::optim::GradScaler;

/// A GradScaler handle in scripts.
#[derive(Clone)]
struct Scaler(Rc<RefCell<GradScaler>>);

/// Registers `autocast`, `grad_scaler` and the scaler's methods.
pub(crate) fn register(engine: &mut Engine, ctx: &Shared) {
    // The guard lives as long as the engine, which lives as long as the run: a policy never outlasts it.
    let held: Rc<RefCell<Option<AutocastGuard>>> = Rc::new(RefCell::new(None));
    engine.register_fn("autocast", move |on: bool| {
        let mut h = held.borrow_mut();
        // Restore the state before the run first, so calls replace each other rather than nest.
        drop(h.take());
        *h = Some(autocast(on));
    });
    engine.register_type_with_name::<Scaler>("GradScaler");
    let c = ctx.clone();
    engine.register_fn("grad_scaler", move |init: Dynamic| -> R<Scaler> {
        let d = c.borrow().device.clone();
        let init = float_arg(&init, "grad_scaler's init_scale")? as f32;
        let s = GradScaler::new(&d, init, 2.0, 0.5, 2000).map_err(engine_err)?;
        Ok(Scaler(Rc::new(RefCell::new(s))))
    });
    let c = ctx.clone();
    engine.register_fn("scale", move |s: &mut Scaler, loss: Var| -> R<Var> {
        let v = s.0.borrow().scale(&loss).map_err(engine_err)?;
        track_var(&c, v)
    });
    engine.register_fn("step", |s: &mut Scaler, o: Opt| -> R<()> {
        s.0.borrow_mut()
            .step(&mut o.0.borrow_mut())
            .map_err(engine_err)
    });
    engine.register_fn("update", |s: &mut Scaler| -> R<()> {
        s.0.borrow_mut().update().map_err(engine_err)
    });
    engine.register_fn("get_scale", |s: &mut Scaler| -> R<FLOAT> {
        Ok(s.0.borrow().get_scale().map_err(engine_err)? as FLOAT)
    });
}
