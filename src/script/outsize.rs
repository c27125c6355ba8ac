//! Output sizes of ops, worked out from their operands' shapes before an op runs, so that a run's limits are
//! charged before anything is allocated (see `bindings::precharge`).
//!
//! Each function gives the output's element count; `Some(0)` where the shapes or options do not fit the op (the
//! op itself then reports the problem in its own words), `None` where the count overflows (always over a limit).

use crate::ops::ConvTranspose2dOptions;

/// The product of `shape`; `None` on overflow.
pub(crate) fn product(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// The output length of a sliding window: `(size + 2·pad − dilation·(k − 1) − 1) / stride + 1`.
fn window(size: usize, pad: usize, dilation: usize, k: usize, stride: usize) -> Option<usize> {
    if k == 0 || stride == 0 || dilation == 0 {
        return Some(0);
    }
    let padded = pad.checked_mul(2)?.checked_add(size)?;
    let span = dilation.checked_mul(k - 1)?.checked_add(1)?;
    if padded < span {
        return Some(0);
    }
    Some((padded - span) / stride + 1)
}

/// `conv2d(x, w)`: (N, Cout, OH, OW) for x (N, C, H, W) and w (Cout, C/groups, KH, KW).
pub(crate) fn conv2d(
    x: &[usize],
    w: &[usize],
    stride: usize,
    padding: usize,
    dilation: usize,
) -> Option<usize> {
    let ([n, _, h, wd], [f, _, kh, kw]) = (x, w) else {
        return Some(0);
    };
    let oh = window(*h, padding, dilation, *kh, stride)?;
    let ow = window(*wd, padding, dilation, *kw, stride)?;
    product(&[*n, *f, oh, ow])
}

/// `depthwise_conv2d(x, w)`: (N, C, OH, OW) for x (N, C, H, W) and w (C, 1, K, K).
pub(crate) fn depthwise(x: &[usize], w: &[usize], stride: usize, padding: usize) -> Option<usize> {
    let ([n, c, h, wd], [_, _, kh, kw]) = (x, w) else {
        return Some(0);
    };
    let oh = window(*h, padding, 1, *kh, stride)?;
    let ow = window(*wd, padding, 1, *kw, stride)?;
    product(&[*n, *c, oh, ow])
}

/// `conv_transpose2d(x, w)`: (N, Cout, (H−1)·s − 2p + K + output_padding, …) for x (N, Cin, H, W) and
/// w (Cin, Cout, KH, KW), with the first stride, padding and output padding of `opts`.
pub(crate) fn conv_transpose2d(
    x: &[usize],
    w: &[usize],
    opts: &ConvTranspose2dOptions,
) -> Option<usize> {
    let ([n, _, h, wd], [_, f, kh, kw]) = (x, w) else {
        return Some(0);
    };
    let (stride, padding) = (opts.conv.stride[0], opts.conv.padding[0]);
    let output_padding = opts.output_padding[0];
    let side = |size: usize, k: usize| -> Option<usize> {
        if k == 0 {
            return Some(0);
        }
        let full = size
            .max(1)
            .checked_sub(1)?
            .checked_mul(stride)?
            .checked_add(k)?
            .checked_add(output_padding)?;
        Some(full.saturating_sub(padding.checked_mul(2)?))
    };
    product(&[*n, *f, side(*h, *kh)?, side(*wd, *kw)?])
}

/// `max_pool2d` / `avg_pool2d`: (N, C, OH, OW) for x (N, C, H, W).
pub(crate) fn pool2d(x: &[usize], kernel: usize, stride: usize, padding: usize) -> Option<usize> {
    let [n, c, h, w] = x else {
        return Some(0);
    };
    let oh = window(*h, padding, 1, kernel, stride)?;
    let ow = window(*w, padding, 1, kernel, stride)?;
    product(&[*n, *c, oh, ow])
}

/// `bmm(a, b)`: (B, M, N) for a (B, M, K) and b (B, K, N).
pub(crate) fn bmm(a: &[usize], b: &[usize]) -> Option<usize> {
    let ([batch, m, _], [_, _, n]) = (a, b) else {
        return Some(0);
    };
    product(&[*batch, *m, *n])
}

/// `cat(xs, axis)`: the first shape with its `axis` size replaced by the sum of every operand's.
pub(crate) fn cat(shapes: &[&[usize]], axis: i64) -> Option<usize> {
    let Some(first) = shapes.first() else {
        return Some(0);
    };
    let rank = first.len() as i64;
    let a = if axis < 0 { axis + rank } else { axis };
    if a < 0 || a >= rank {
        return Some(0);
    }
    let a = a as usize;
    let mut joined = 0usize;
    for s in shapes {
        joined = joined.checked_add(*s.get(a)?)?;
    }
    let mut shape = first.to_vec();
    shape[a] = joined;
    product(&shape)
}

/// `upsample(x, factor)`: (N, C, H·factor, W·factor) for x (N, C, H, W).
pub(crate) fn upsample(x: &[usize], factor: usize) -> Option<usize> {
    let [n, c, h, w] = x else {
        return Some(0);
    };
    product(&[*n, *c, h.checked_mul(factor)?, w.checked_mul(factor)?])
}

/// Every shape broadcast together (numpy rules); `Some(0)` when they do not broadcast.
pub(crate) fn broadcast(shapes: &[&[usize]]) -> Option<usize> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut n = 1usize;
    for i in 0..rank {
        let mut d = 1usize;
        for s in shapes {
            let x = if i < s.len() { s[s.len() - 1 - i] } else { 1 };
            if x != 1 {
                if d != 1 && d != x {
                    return Some(0);
                }
                d = x;
            }
        }
        n = n.checked_mul(d)?;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Conv2dOptions;

    /// Transposed-convolution options of one stride, padding and output padding.
    fn transposed(stride: usize, padding: usize, output_padding: usize) -> ConvTranspose2dOptions {
        ConvTranspose2dOptions {
            conv: Conv2dOptions {
                stride: [stride; 2],
                padding: [padding; 2],
                ..Conv2dOptions::default()
            },
            output_padding: [output_padding; 2],
        }
    }

    #[test]
    fn sizes_match_the_ops() {
        assert_eq!(
            conv2d(&[2, 3, 8, 8], &[4, 3, 3, 3], 1, 1, 1),
            Some(2 * 4 * 64)
        );
        assert_eq!(conv2d(&[1, 3, 8, 8], &[4, 3, 3, 3], 2, 0, 1), Some(4 * 9));
        assert_eq!(conv2d(&[1, 3, 2, 2], &[4, 3, 3, 3], 1, 0, 1), Some(0));
        assert_eq!(conv2d(&[1, 3, 8], &[4, 3, 3, 3], 1, 0, 1), Some(0));
        assert_eq!(depthwise(&[1, 8, 5, 5], &[8, 1, 3, 3], 1, 1), Some(8 * 25));
        // (4 − 1)·2 + 3 + 1 − 2 = 8
        assert_eq!(
            conv_transpose2d(&[1, 2, 4, 4], &[2, 5, 3, 3], &transposed(2, 1, 1)),
            Some(5 * 64)
        );
        assert_eq!(pool2d(&[1, 2, 8, 8], 2, 2, 0), Some(2 * 16));
        assert_eq!(bmm(&[3, 4, 5], &[3, 5, 6]), Some(72));
        assert_eq!(cat(&[&[2, 3], &[4, 3]], 0), Some(18));
        assert_eq!(cat(&[&[2, 3], &[2, 1]], -1), Some(8));
        assert_eq!(cat(&[&[2, 3]], 2), Some(0));
        assert_eq!(upsample(&[1, 1, 4, 4], 3), Some(144));
        assert_eq!(broadcast(&[&[16384, 1], &[1, 16384]]), Some(1 << 28));
        assert_eq!(broadcast(&[&[2, 3], &[4]]), Some(0));
        assert_eq!(broadcast(&[&[3], &[2, 1], &[]]), Some(6));
    }

    #[test]
    fn overflow_is_none() {
        let big = usize::MAX / 2;
        assert_eq!(upsample(&[1, 1, 4, 4], big), None);
        assert_eq!(
            conv_transpose2d(&[1, 1, 4, 4], &[1, 1, 3, 3], &transposed(big, 0, 0)),
            None
        );
        assert_eq!(conv2d(&[1, 1, 4, 4], &[1, 1, 3, 3], 1, big, 1), None);
        assert_eq!(cat(&[&[big, 2], &[big, 2], &[big, 2]], 0), None);
        assert_eq!(broadcast(&[&[big, 1], &[1, big]]), None);
    }
}
