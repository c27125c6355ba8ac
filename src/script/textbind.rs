//! Playground bindings for character-level text models: the texts shipped with the engine (`text_data`),
//! a character vocabulary (`char_vocab`), `encode` and `decode` between text and i32 token ids, random
//! training windows (`char_batch`), and `narrow`, which cuts a slice of a tensor along one axis (how a script
//! takes one head's queries out of a fused projection).

use rhai::{Dynamic, Engine, INT, Map};

use super::bindings::{R, seed_arg, track, track_var};
use super::{Shared, engine_err, script_err};
use crate::autograd::Var;
use crate::ops;
use crate::tensor::Tensor;

/// The texts `text_data(name)` knows: name, then the text (see `data/README.md` for sources and licences).
const TEXTS: &[(&str, &str)] = &[("coriolanus", include_str!("../../data/coriolanus.txt"))];

fn non_negative(n: INT, what: &str) -> R<usize> {
    usize::try_from(n).map_err(|_| {
        script_err(
            "invalid",
            format!("{what} is a non-negative integer, got {n}"),
        )
    })
}

/// The token id of each character of `text` in `vocab`, or an error naming the first character it lacks.
fn ids_of(text: &str, vocab: &str) -> R<Vec<i32>> {
    let table: Vec<char> = vocab.chars().collect();
    text.chars()
        .map(|c| {
            table
                .iter()
                .position(|&v| v == c)
                .map(|i| i as i32)
                .ok_or_else(|| {
                    script_err(
                        "invalid",
                        format!("the character {c:?} is not in the vocabulary"),
                    )
                })
        })
        .collect()
}

/// Registers the text bindings.
pub(crate) fn register(engine: &mut Engine, ctx: &Shared) {
    engine.register_fn("text_data", |name: &str| -> R<String> {
        TEXTS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| (*t).to_owned())
            .ok_or_else(|| {
                let names: Vec<&str> = TEXTS.iter().map(|(n, _)| *n).collect();
                script_err(
                    "invalid",
                    format!("no text `{name}`; texts are {}", names.join(", ")),
                )
            })
    });
    engine.register_fn("char_vocab", |text: &str| -> String {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        chars.into_iter().collect()
    });
    let c = ctx.clone();
    engine.register_fn("encode", move |text: &str, vocab: &str| -> R<Var> {
        let ids = ids_of(text, vocab)?;
        let d = c.borrow().device.clone();
        track(
            &c,
            Tensor::from_slice(&d, &ids, &[ids.len()]).map_err(engine_err)?,
        )
    });
    engine.register_fn("decode", |ids: Var, vocab: &str| -> R<String> {
        let table: Vec<char> = vocab.chars().collect();
        let values = ids.value().to_f32_vec().map_err(engine_err)?;
        values
            .iter()
            .map(|&v| {
                let i = v as i64;
                usize::try_from(i)
                    .ok()
                    .filter(|&i| i < table.len() && v.fract() == 0.0)
                    .map(|i| table[i])
                    .ok_or_else(|| {
                        script_err(
                            "invalid",
                            format!(
                                "token id {v} is outside the vocabulary of {} characters",
                                table.len()
                            ),
                        )
                    })
            })
            .collect()
    });
    let c = ctx.clone();
    engine.register_fn(
        "char_batch",
        move |ids: Var, batch: INT, context: INT, seed: INT| -> R<Map> {
            let (b, s) = (
                non_negative(batch, "char_batch's batch")?,
                non_negative(context, "char_batch's context")?,
            );
            let seed = seed_arg(seed)?;
            let tokens = ids.value().to_vec::<i32>().map_err(|_| {
                script_err(
                    "dtype",
                    format!(
                        "char_batch takes i32 token ids (from encode), not {}",
                        ids.value().dtype()
                    ),
                )
            })?;
            if b == 0 || s == 0 || tokens.len() < s + 1 {
                return Err(script_err(
                    "invalid",
                    format!(
                        "char_batch needs batch ≥ 1, context ≥ 1 and more than context tokens (batch {b}, context {s}, {} tokens)",
                        tokens.len()
                    ),
                ));
            }
            let elements = b.checked_mul(s).ok_or_else(|| {
                script_err("limit", "char_batch's batch × context overflows")
            })?;
            super::bindings::precheck(&c, &[b, s])?;
            let starts = tokens.len() - s;
            let mut x = Vec::with_capacity(elements);
            let mut y = Vec::with_capacity(elements);
            for row in 0..b {
                let at = (crate::rng::hash(seed, row as u64) % starts as u64) as usize;
                x.extend_from_slice(&tokens[at..at + s]);
                y.extend_from_slice(&tokens[at + 1..at + s + 1]);
            }
            let d = c.borrow().device.clone();
            let mut out = Map::new();
            for (key, v) in [("x", x), ("y", y)] {
                let t = Tensor::from_slice(&d, &v, &[b, s]).map_err(engine_err)?;
                out.insert(key.into(), Dynamic::from(track(&c, t)?));
            }
            Ok(out)
        },
    );
    let c = ctx.clone();
    engine.register_fn(
        "narrow",
        move |x: Var, axis: INT, start: INT, len: INT| -> R<Var> {
            if x.requires_grad() {
                return Err(script_err(
                    "invalid",
                    "narrow is forward-only; take the slice of detach(x)",
                ));
            }
            let axis = isize::try_from(axis)
                .map_err(|_| script_err("invalid", format!("axis {axis} is out of range")))?;
            let t = ops::shape::narrow(
                x.value(),
                axis,
                non_negative(start, "narrow's start")?,
                non_negative(len, "narrow's len")?,
            )
            .map_err(engine_err)?;
            track_var(&c, Var::constant(t))
        },
    );
}
