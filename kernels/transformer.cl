// The small ops of a transformer layer: rotary position embedding, masked fill, and the embedding gradient
// (an index-add of output-gradient rows into the weight's rows). Float inputs are read with LDX(IN_HALF, …)
// (the mask with LDX(B_HALF, …)) and outputs written with STX(OUT_HALF, …) (kernels/prelude.cl); the embedding
// gradient always accumulates into an f32 table.

// RoPE on [rows, HDIM] with rows = lead·S: pair (2t, 2t+1) of row r at position pos[r mod S] is rotated by
// pos·base^(−2t/HDIM), the angle negated when sgn < 0 (the inverse rotation, which is also the gradient).
__kernel void rope_pairs(const int rows, const int S, const int HDIM, const float base, const float sgn,
                         __global const float* x, __global const int* pos, __global float* y) {
    const int gid = get_global_id(0);
    const int pairs = HDIM / 2;
    if (gid >= rows * pairs) return;
    const int row = gid / pairs;
    const int t = gid - row * pairs;
    const int s = row % S;
    const float theta = pow(base, -2.0f * (float)t / (float)HDIM);
    const float ang = (float)pos[s] * theta;
    const float c = cos(ang);
    const float sn = sin(ang) * sgn;
    const size_t off = (size_t)row * HDIM + 2 * t;
    const float a = LDX(IN_HALF, x, off);
    const float b = LDX(IN_HALF, x, off + 1);
    STX(OUT_HALF, a * c - b * sn, y, off);
    STX(OUT_HALF, a * sn + b * c, y, off + 1);
}

// y[i] = value where mask[i mod M] ≠ 0, else x[i]; the mask tiles over x's leading dimensions.
__kernel void masked_fill(const int N, const int M, const float value, __global const float* x,
                          __global const float* mask, __global float* y) {
    const int i = get_global_id(0);
    if (i >= N) return;
    STX(OUT_HALF, LDX(B_HALF, mask, i % M) != 0.0f ? value : LDX(IN_HALF, x, i), y, i);
}

// dw[idx[n], :] += g[n, :] for n < N over a zeroed dw of [V, E]; one work-item per (n, column). Repeated
// indices meet in the atomic add.
__kernel void embedding_grad(const int N, const int E, __global const int* idx, __global const float* g,
                             __global float* dw) {
    const int gid = get_global_id(0);
    if (gid >= N * E) return;
    const int n = gid / E;
    const int e = gid - n * E;
    ncl_atomic_add(dw + (size_t)idx[n] * E + e, LDX(IN_HALF, g, gid));
}
