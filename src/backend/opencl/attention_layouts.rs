//! The attention layouts offered to the tuner and whether each fits a device: the local memory each pass's
//! tiles need, the work-group size, the head dimension, and the form the forward's block layout is built in
//! (warp shuffles, asynchronous copies) where the device has them.

use crate::contract::attention::AttnAlgo;

/// Which pass a tile layout is checked for: the local memory each needs differs.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Pass {
    Forward,
    Backward,
}

/// Floats of local memory a tile layout needs for head dimension `d` (rows padded to d + 1).
pub(super) fn tile_local_floats(pass: Pass, d: usize, bq: usize, bk: usize) -> usize {
    let ld = d + 1;
    match pass {
        Pass::Forward => (bq + bk) * ld + bq * (bk + 1),
        // dq: q, dO (bq rows), k, v (bk rows), ds; dkv: k, v (bq rows), q, dO (bk rows), p, ds.
        Pass::Backward => (2 * bq + 2 * bk) * ld + 2 * bq * (bk + 1),
    }
}

/// The lane layouts offered to CPU devices (vw, kb), after the GPU ones; the first is their default.
pub(super) const LANES: &[(usize, usize)] = &[(16, 8), (16, 4), (8, 8)];

/// Whether a lane layout is one the CPU kernels compile: 4, 8 or 16 lanes, 1 to 16 streamed rows per block.
pub(super) fn lanes_fit(vw: usize, kb: usize) -> bool {
    matches!(vw, 4 | 8 | 16) && (1..=16).contains(&kb)
}

/// The tile layouts offered (bq, bk, tpr).
pub(super) const TILES: &[(usize, usize, usize)] = &[
    (16, 16, 4),
    (16, 32, 8),
    (32, 32, 4),
    (32, 32, 8),
    (64, 32, 4),
    (64, 64, 8),
    (8, 16, 16),
    (16, 16, 16),
];

/// The block layouts offered to GPU devices (bq, bk, rq, rk: rows and streamed rows per work-group, and per
/// work-item's register block, `BLOCK_RQ` × `BLOCK_RK`), each where it fits the pass.
pub(super) const BLOCKS: &[(usize, usize, usize, usize)] = &[
    (64, 32, 4, 4),
    (32, 64, 4, 4),
    (32, 32, 4, 4),
    (64, 64, 4, 4),
    (64, 32, 8, 4),
    (32, 32, 8, 4),
    (64, 32, 8, 8),
    (32, 64, 4, 8),
];

/// The largest head dimension the block layout takes (its accumulators and tiles grow with it).
pub(super) const BLOCK_MAX_D: usize = 128;

/// Floats of local memory a block layout needs (rows of d-wide tiles padded to d + 4, of probability tiles to
/// bk + 4). Forward: the q tile, the shared key/value tile, the P tile and one partial row maximum per item and
/// row. Backward, the larger of its kernels, dk/dv: the k, v (bq rows), q and dO (bk rows) tiles, the P and dS
/// tiles, and the lse and delta of bk queries (dq holds the same four tiles and one probability tile).
pub(super) fn block_local_floats(pass: Pass, d: usize, bq: usize, bk: usize, rk: usize) -> usize {
    match pass {
        Pass::Forward => fwd_local_floats(d, (bq, bk, rk), false, false),
        Pass::Backward => 2 * (bq + bk) * (d + 4) + 2 * bq * (bk + 4) + 2 * bk,
    }
}

/// Floats of local memory the forward's block layout (bq, bk, rk) needs in the form built: with row maxima
/// combined by shuffles (`shfl`) it holds no partial maxima; with asynchronous copies (`copies`) the value tile
/// has a buffer of its own.
pub(super) fn fwd_local_floats(
    d: usize,
    (bq, bk, rk): (usize, usize, usize),
    shfl: bool,
    copies: bool,
) -> usize {
    let tiles = (bq + bk * (1 + usize::from(copies))) * (d + 4) + bq * (bk + 4);
    match shfl {
        true => tiles,
        false => tiles + bq * (bk / rk),
    }
}

/// The form the forward's block layout `b` (bq, bk, rq, rk) is built in (`NCL_SHFL`, `NCL_ASYNC` in
/// `kernels/attention_block.cl`), given what the device offers: shuffles (`warps`: whether groups of whole
/// warps fold by shuffles) where a row's items are a power of two, at most a warp; asynchronous copies
/// (`copies`) where the second key/value tile still fits `local_bytes`.
pub(super) fn fwd_block_form(
    d: usize,
    (bq, bk, _, rk): (usize, usize, usize, usize),
    warps: bool,
    copies: bool,
    local_bytes: u64,
) -> (bool, bool) {
    let tx = bk / rk;
    let shfl = warps && tx.is_power_of_two() && tx <= 32;
    let copies =
        copies && (fwd_local_floats(d, (bq, bk, rk), shfl, true) * 4) as u64 <= local_bytes;
    (shfl, copies)
}

/// Whether the block layout (bq, bk, rq, rk) compiles and launches for `pass` at head dimension `d` on a device
/// of `max_wg` work-items per group and `local_bytes` of local memory: d a multiple of 4 up to 128, a register
/// block of 4 or 8 rows by 4 or 8 streamed rows (4 × 4 in the backward), bq and bk multiples of it, at most 8
/// float4 output groups per item and row (32 accumulators per row; 4 in the backward, which holds two sets),
/// the work-group within the device's size and the tiles within its local memory.
pub(super) fn block_fits(
    pass: Pass,
    d: usize,
    (bq, bk, rq, rk): (usize, usize, usize, usize),
    max_wg: usize,
    local_bytes: u64,
) -> bool {
    let regs_ok = match pass {
        Pass::Forward => matches!(rq, 4 | 8) && matches!(rk, 4 | 8),
        Pass::Backward => rq == 4 && rk == 4,
    };
    let tx = bk.checked_div(rk).unwrap_or(0);
    let groups = if pass == Pass::Backward { 4 } else { 8 };
    regs_ok
        && d > 0
        && d.is_multiple_of(4)
        && d <= BLOCK_MAX_D
        && bq > 0
        && tx > 0
        && bq.is_multiple_of(rq)
        && bk.is_multiple_of(rk)
        && bk.is_multiple_of(4)
        && (d / 4).div_ceil(tx) <= groups
        && (bq / rq) * tx <= max_wg
        && (block_local_floats(pass, d, bq, bk, rk) * 4) as u64 <= local_bytes
}

/// The block layouts offered to the tuner on GPU-like devices (not CPU OpenCL, where barriers and local memory
/// are slow): those of [`BLOCKS`] that fit the pass.
pub(super) fn block_candidates(
    pass: Pass,
    cpu: bool,
    d: usize,
    max_wg: usize,
    local_bytes: u64,
) -> Vec<AttnAlgo> {
    if cpu {
        return Vec::new();
    }
    BLOCKS
        .iter()
        .filter(|&&b| block_fits(pass, d, b, max_wg, local_bytes))
        .map(|&(bq, bk, rq, rk)| AttnAlgo::Block(bq, bk, rq, rk))
        .collect()
}

/// The fused backward layouts offered beside the backward's block layouts `blocks` (those that fit): one per
/// square block (`n` = bq = bk), with single-float atomic adds, and on NVIDIA GPUs also four floats per add.
pub(super) fn fused_candidates(blocks: &[AttnAlgo], nvidia: bool) -> Vec<AttnAlgo> {
    let mut out = Vec::new();
    for a in blocks {
        if let &AttnAlgo::Block(bq, bk, _, _) = a
            && bq == bk
        {
            out.push(AttnAlgo::Fused(bq, 1));
            if nvidia {
                out.push(AttnAlgo::Fused(bq, 4));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The limits an NVIDIA H200 reports: 1024 items per work-group, 48 KiB of local memory per group.
    const GPU: (usize, u64) = (1024, 48 * 1024);

    fn offered(pass: Pass, cpu: bool, d: usize) -> Vec<AttnAlgo> {
        block_candidates(pass, cpu, d, GPU.0, GPU.1)
    }

    #[test]
    fn block_layouts_are_offered_to_gpus_where_their_tiles_fit() {
        use AttnAlgo::Block;
        use Pass::{Backward, Forward};
        // D = 64: the forward's (64, 64) needs 56 KiB; the backward's (32, 32) needs 43 KiB, (64, 32) 69 KiB;
        // the wider register blocks are forward only.
        assert_eq!(
            offered(Forward, false, 64),
            [
                Block(64, 32, 4, 4),
                Block(32, 64, 4, 4),
                Block(32, 32, 4, 4),
                Block(64, 32, 8, 4),
                Block(32, 32, 8, 4),
                Block(64, 32, 8, 8),
                Block(32, 64, 4, 8)
            ]
        );
        assert_eq!(offered(Backward, false, 64), [Block(32, 32, 4, 4)]);
        // D = 40 (not a power of two): every forward fits, (64, 64) in 43 KiB.
        assert_eq!(offered(Forward, false, 40).len(), BLOCKS.len());
        assert_eq!(offered(Backward, false, 40), [Block(32, 32, 4, 4)]);
        // D = 128: the 32-row forwards; no backward fits 48 KiB.
        assert_eq!(
            offered(Forward, false, 128),
            [Block(32, 32, 4, 4), Block(32, 32, 8, 4)]
        );
        assert!(offered(Backward, false, 128).is_empty());
        // Head dimensions that are not a multiple of 4, or above 128, get none.
        for d in [42, 130, 256] {
            assert!(offered(Forward, false, d).is_empty(), "d {d}");
            assert!(offered(Backward, false, d).is_empty(), "d {d}");
        }
        // Never to CPU devices.
        assert!(offered(Forward, true, 64).is_empty());
        assert!(offered(Backward, true, 64).is_empty());
        // A device of 32 KiB and 128 items per group.
        assert_eq!(
            block_candidates(Forward, false, 64, 128, 32 * 1024),
            [Block(32, 32, 4, 4), Block(32, 32, 8, 4)]
        );
    }

    #[test]
    fn fused_backward_is_offered_where_the_square_block_backward_fits() {
        use AttnAlgo::Fused;
        use Pass::Backward;
        let fused = |cpu, nvidia, d, local_bytes| {
            fused_candidates(
                &block_candidates(Backward, cpu, d, GPU.0, local_bytes),
                nvidia,
            )
        };
        let lm = GPU.1;
        assert_eq!(fused(false, true, 64, lm), [Fused(32, 1), Fused(32, 4)]);
        assert_eq!(fused(false, false, 64, lm), [Fused(32, 1)]);
        assert_eq!(fused(false, false, 40, lm), [Fused(32, 1)]);
        // 64 × 64 blocks (103 KiB) fit a device of 128 KiB.
        assert_eq!(
            fused(false, false, 64, 128 * 1024),
            [Fused(32, 1), Fused(64, 1)]
        );
        assert!(fused(false, true, 128, lm).is_empty());
        assert!(fused(true, false, 64, lm).is_empty());
    }

    #[test]
    fn forward_block_form_takes_shuffles_and_async_copies_where_they_fit() {
        let lm = GPU.1;
        // D = 64, (64, 32): 8 items a row; the second tile brings it to 43 KiB.
        assert_eq!(
            fwd_block_form(64, (64, 32, 4, 4), true, true, lm),
            (true, true)
        );
        assert_eq!(fwd_local_floats(64, (64, 32, 4), true, true) * 4, 44032);
        // (32, 64): 16 items a row, but a second 64-row tile would need 51 KiB.
        assert_eq!(
            fwd_block_form(64, (32, 64, 4, 4), true, true, lm),
            (true, false)
        );
        // D = 128: no room for the second tile at 48 KiB, room at 64 KiB.
        assert_eq!(
            fwd_block_form(128, (32, 32, 4, 4), true, true, lm),
            (true, false)
        );
        assert_eq!(
            fwd_block_form(128, (32, 32, 4, 4), true, true, 64 * 1024),
            (true, true)
        );
        // 12 items a row are not a power of two: their maxima go through local memory.
        assert_eq!(
            fwd_block_form(64, (32, 48, 4, 4), true, true, lm),
            (false, true)
        );
        // A device without shuffles or copies gets neither.
        assert_eq!(
            fwd_block_form(64, (64, 32, 4, 4), false, false, lm),
            (false, false)
        );
        // Without shuffles the partial maxima are counted: the (64, 32) form with copies still fits.
        assert_eq!(
            fwd_block_form(64, (64, 32, 4, 4), false, true, lm),
            (false, true)
        );
        assert_eq!(
            fwd_local_floats(64, (64, 32, 4), false, false),
            block_local_floats(Pass::Forward, 64, 64, 32, 4)
        );
    }

    #[test]
    fn block_fits_checks_every_limit() {
        use Pass::{Backward, Forward};
        let (wg, lm) = GPU;
        assert!(block_fits(Forward, 64, (32, 32, 4, 4), wg, lm));
        assert!(
            !block_fits(Forward, 64, (30, 32, 4, 4), wg, lm),
            "bq not a multiple of 4"
        );
        assert!(
            !block_fits(Forward, 64, (32, 30, 4, 4), wg, lm),
            "bk not a multiple of 4"
        );
        assert!(!block_fits(Forward, 64, (32, 0, 4, 4), wg, lm), "no keys");
        assert!(!block_fits(Forward, 64, (0, 32, 4, 4), wg, lm), "no rows");
        // bk = 8: two items per row would hold 8 float4 groups of D = 64 each, too many for the backward's two
        // accumulator sets; bk = 4 is too many for either.
        assert!(block_fits(Forward, 64, (32, 8, 4, 4), wg, lm));
        assert!(!block_fits(Backward, 64, (32, 8, 4, 4), wg, lm));
        assert!(!block_fits(Forward, 64, (32, 4, 4, 4), wg, lm));
        assert!(block_fits(Forward, 32, (32, 4, 4, 4), wg, lm));
        assert!(
            !block_fits(Forward, 64, (32, 32, 4, 4), 32, lm),
            "64 items over a 32-item limit"
        );
        // Register blocks of 4 or 8 by 4 or 8 in the forward, 4 × 4 only in the backward.
        assert!(block_fits(Forward, 64, (64, 32, 8, 4), wg, lm));
        assert!(block_fits(Forward, 64, (64, 32, 8, 8), wg, lm));
        assert!(!block_fits(Backward, 64, (32, 32, 8, 4), wg, lm));
        assert!(!block_fits(Forward, 64, (48, 32, 6, 4), wg, lm), "rq 6");
        assert!(!block_fits(Forward, 64, (32, 32, 4, 0), wg, lm), "rk 0");
        for (pass, floats) in [
            (Forward, 64 * 68 + 32 * 36 + 32 * 8),
            (Backward, 2 * 64 * 68 + 2 * 32 * 36 + 2 * 32),
        ] {
            let need = (block_local_floats(pass, 64, 32, 32, 4) * 4) as u64;
            assert_eq!(need, floats * 4);
            assert!(block_fits(pass, 64, (32, 32, 4, 4), wg, need));
            assert!(!block_fits(pass, 64, (32, 32, 4, 4), wg, need - 4));
        }
    }
}
