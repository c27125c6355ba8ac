//! The op set. Each family validates its inputs, computes the output shape, chooses an algorithm, and calls
//! its primitive trait, which every device kind implements (OpenCL kernels, or plain Rust on the built-in
//! device). Op code never matches on the device kind.

pub mod attention;
pub mod conv;
pub mod depthwise;
pub mod dropout;
pub mod elementwise;
pub mod fused;
pub mod gemm;
pub mod norm;
pub mod policy;
pub mod pool;
pub mod reduce;
pub mod resize;
pub mod shape;
pub mod softmax;
pub mod transformer;
pub mod unary;
pub mod update;

pub use attention::{
    AttentionGrads, AttentionOut, AttnAlgo, DecodeAlgo, MAX_HEAD_DIM, attention_decode,
    attention_decode_with, flash_attention, flash_attention_backward,
    flash_attention_backward_with, flash_attention_with,
};
pub use conv::{
    Conv2dGrads, Conv2dOptions, ConvAlgo, ConvTranspose2dOptions, conv_transpose2d,
    conv_transpose2d_backward, conv2d, conv2d_backward,
};
pub use depthwise::{
    DwAlgo, depthwise_conv2d, depthwise_conv2d_algo, depthwise_conv2d_backward,
    depthwise_conv2d_backward_algo,
};
pub use dropout::{dropout, dropout_backward};
pub use elementwise::{BinaryOp, add, binary, broadcast_shape, div, maximum, minimum, mul, sub};
pub use elementwise::{
    add_scalar, binary_scalar, div_scalar, eq, ge, gt, le, lt, mul_scalar, ne, pow, pow_scalar,
};
pub use elementwise::{rdiv_scalar, rsub_scalar, sub_scalar};
pub use fused::{ALIASES, Expr, Grad, OPS, OpDef, function_names};
pub use fused::{broadcast_to, fused, fused_expr, where_};
pub use gemm::{
    bmm, bmm_candidates, bmm_prec, bmm_with, matmul, matmul_candidates, matmul_prec, matmul_t,
    matmul_with,
};
pub use norm::{
    BatchNormOut, NormGrads, NormOut, batch_norm2d, batch_norm2d_backward, group_norm,
    group_norm_backward,
};
pub use norm::{layer_norm, layer_norm_backward, rms_norm, rms_norm_backward};
pub use pool::{
    MaxPoolOut, Pool2d, avg_pool2d, avg_pool2d_backward, global_avg_pool2d,
    global_avg_pool2d_backward,
};
pub use pool::{max_pool2d, max_pool2d_backward};
pub use reduce::{
    ReduceAlgo, ReduceOp, argmax, argmin, global_l2_norm, max, mean, min, prod, reduce,
    reduce_to_shape,
};
pub use reduce::{reduce_with, sum, sum_all};
pub use resize::{Upsample, upsample, upsample_backward};
pub use shape::{
    PadMode, cat, index_select, narrow, one_hot, one_hot_as, pad2d, pad2d_backward, permute, split,
    topk, transpose,
};
pub use softmax::{
    SoftmaxAlgo, cross_entropy, cross_entropy_backward, log_softmax, log_softmax_backward, softmax,
};
pub use softmax::{softmax_backward, softmax_backward_with, softmax_with};
pub use transformer::{
    causal_mask, embedding, embedding_backward, masked_fill, masked_fill_backward, rope,
};
pub use unary::{UnaryOp, unary, unary_backward};
pub use unary::{
    abs, clamp, elu, exp, gelu, hard_sigmoid, hard_swish, hard_tanh, leaky_relu, log, neg, relu,
    sigmoid,
};
pub use unary::{prelu, prelu_backward, silu, softplus, sqrt, tanh};

/// Refuses a tensor of more elements than the kernels index with an `int` (2^31 − 1), naming op `op`.
#[inline]
pub(crate) fn limit(x: &crate::tensor::Tensor, op: &str) -> crate::error::Result<()> {
    if x.numel() > i32::MAX as usize {
        return Err(crate::error::Error::Limit(format!(
            "{op}: {} elements exceed the 2^31-1 per-op limit",
            x.numel()
        )));
    }
    Ok(())
}
