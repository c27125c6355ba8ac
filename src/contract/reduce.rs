//! The reduction family's contract: the canonical [O, R, I] view of one pass.

/// The canonical view of one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ori {
    pub o: usize,
    pub r: usize,
    pub i: usize,
}
