// Convolution family (NCHW activations, F x C/groups x KH x KW weights): direct kernels, im2col / col2im for
// the GEMM path, batch and bias reductions, weight flipping for the Winograd grad_x (kernels/winograd.cl holds the
// Winograd transforms).
//
// Geometry is passed as two int8 vectors:
//   g0 = (N, C, H, W, F, OH, OW, groups)      g1 = (KH, KW, SH, SW, PH, PW, DH, DW)

#define GEOM                                                                                   \
    const int N = g0.s0, C = g0.s1, H = g0.s2, W = g0.s3, F = g0.s4, OH = g0.s5, OW = g0.s6;   \
    const int G = g0.s7, KH = g1.s0, KW = g1.s1, SH = g1.s2, SW = g1.s3, PH = g1.s4, PW = g1.s5; \
    const int DH = g1.s6, DW = g1.s7;                                                          \
    const int CG = C / G, FG = F / G;

// out[n][f][oh][ow] = sum over the group's channels and the window, + bias[f], optional ReLU.
// One output per work-item.
__kernel void conv_direct_fwd(const int8 g0, const int8 g1,
                              __global const float* restrict x, __global const float* restrict w,
                              __global const float* restrict bias, const int has_bias, const int relu,
                              __global float* restrict out)
{
    GEOM
    const int i = get_global_id(0);
    if (i >= N * F * OH * OW) return;
    const int ow = i % OW, oh = (i / OW) % OH, f = (i / (OW * OH)) % F, n = i / (OW * OH * F);
    const int g = f / FG;
    float acc = 0.0f;
    for (int cl = 0; cl < CG; ++cl) {
        const int c = g * CG + cl;
        __global const float* xp = x + ((size_t)n * C + c) * H * W;
        __global const float* wp = w + ((size_t)f * CG + cl) * KH * KW;
        for (int kh = 0; kh < KH; ++kh) {
            const int y = oh * SH - PH + kh * DH;
            if (y < 0 || y >= H) continue;
            for (int kw = 0; kw < KW; ++kw) {
                const int xx = ow * SW - PW + kw * DW;
                if (xx < 0 || xx >= W) continue;
                acc = fma(xp[y * W + xx], wp[kh * KW + kw], acc);
            }
        }
    }
    if (has_bias) acc += bias[f];
    if (relu) acc = acc < 0.0f ? 0.0f : acc;
    out[i] = acc;
}

// gx[n][c][y][x] = sum over the output positions and filters that read it (gather; no atomics).
__kernel void conv_direct_bwd_x(const int8 g0, const int8 g1,
                                __global const float* restrict go, __global const float* restrict w,
                                __global float* restrict gx)
{
    GEOM
    const int i = get_global_id(0);
    if (i >= N * C * H * W) return;
    const int xx = i % W, y = (i / W) % H, c = (i / (W * H)) % C, n = i / (W * H * C);
    const int g = c / CG, cl = c - g * CG;
    float acc = 0.0f;
    for (int kh = 0; kh < KH; ++kh) {
        const int ty = y + PH - kh * DH;
        if (ty < 0 || ty % SH != 0) continue;
        const int oh = ty / SH;
        if (oh >= OH) continue;
        for (int kw = 0; kw < KW; ++kw) {
            const int tx = xx + PW - kw * DW;
            if (tx < 0 || tx % SW != 0) continue;
            const int ow = tx / SW;
            if (ow >= OW) continue;
            for (int fl = 0; fl < FG; ++fl) {
                const int f = g * FG + fl;
                acc = fma(go[(((size_t)n * F + f) * OH + oh) * OW + ow], w[(((size_t)f * CG + cl) * KH + kh) * KW + kw], acc);
            }
        }
    }
    gx[i] = acc;
}

// gw[f][cl][kh][kw] = sum over n, oh, ow of go * x (one weight per work-item).
__kernel void conv_direct_bwd_w(const int8 g0, const int8 g1,
                                __global const float* restrict x, __global const float* restrict go,
                                __global float* restrict gw)
{
    GEOM
    const int i = get_global_id(0);
    if (i >= F * CG * KH * KW) return;
    const int kw = i % KW, kh = (i / KW) % KH, cl = (i / (KW * KH)) % CG, f = i / (KW * KH * CG);
    const int c = (f / FG) * CG + cl;
    float acc = 0.0f;
    for (int n = 0; n < N; ++n) {
        __global const float* gp = go + ((size_t)n * F + f) * OH * OW;
        __global const float* xp = x + ((size_t)n * C + c) * H * W;
        for (int oh = 0; oh < OH; ++oh) {
            const int y = oh * SH - PH + kh * DH;
            if (y < 0 || y >= H) continue;
            for (int ow = 0; ow < OW; ++ow) {
                const int xx = ow * SW - PW + kw * DW;
                if (xx < 0 || xx >= W) continue;
                acc = fma(gp[oh * OW + ow], xp[y * W + xx], acc);
            }
        }
    }
    gw[i] = acc;
}

// col[b][c * KH * KW + kh * KW + kw][oh * OW + ow] = x[n0 + b][c][...] (0 in the padding), for nb samples.
// One col row (r, b) per work-item, written output row by output row over bounds-free spans: per-work-item
// costs dominate on CPU OpenCL, so each work-item copies a few thousand elements.
__kernel void conv_im2col(const int8 g0, const int8 g1, const int n0, const int nb,
                          __global const float* restrict x, __global float* restrict col)
{
    GEOM
    const int P = OH * OW;
    const int r = get_global_id(0), b = get_global_id(1);
    if (r >= C * KH * KW || b >= nb) return;
    const int kw = r % KW, kh = (r / KW) % KH, c = r / (KW * KH);
    __global const float* xp = x + ((size_t)(n0 + b) * C + c) * H * W;
    __global float* dst = col + ((size_t)b * C * KH * KW + r) * P;
    // Output columns whose input column ow * SW - PW + kw * DW lies in [0, W).
    const int a0 = PW - kw * DW, a1 = W - 1 + PW - kw * DW;
    const int lo = min(OW, max(0, a0 > 0 ? (a0 + SW - 1) / SW : 0));
    const int hi = min(OW - 1, a1 >= 0 ? a1 / SW : -1);
    for (int oh = 0; oh < OH; ++oh) {
        __global float* d = dst + oh * OW;
        const int y = oh * SH - PH + kh * DH;
        if (y < 0 || y >= H) {
            for (int ow = 0; ow < OW; ++ow) d[ow] = 0.0f;
            continue;
        }
        __global const float* xr = xp + y * W - PW + kw * DW;
        for (int ow = 0; ow < lo; ++ow) d[ow] = 0.0f;
        if (SW == 1) {
            for (int ow = lo; ow <= hi; ++ow) d[ow] = xr[ow];
        } else {
            for (int ow = lo; ow <= hi; ++ow) d[ow] = xr[ow * SW];
        }
        for (int ow = max(lo, hi + 1); ow < OW; ++ow) d[ow] = 0.0f;
    }
}

// conv_im2col for GPUs: one col element per work-item, consecutive work-items along the output positions of one
// col row, so consecutive work-items write consecutive addresses (and, at stride 1, read consecutive ones). The row
// kernel above gives a GPU a few thousand work-items, each walking its row alone: on an H200 it took 24 ms for
// one ResNet-18 layer whose product takes 1.6 ms.
__kernel void conv_im2col_elem(const int8 g0, const int8 g1, const int n0, const int nb,
                               __global const float* restrict x, __global float* restrict col)
{
    GEOM
    const int P = OH * OW, RS = C * KH * KW;
    // One dimension (a GPU bounds the others to 65,535 groups), i = (b·RS + r)·P + p < 2^31 (the host checks).
    const int i = get_global_id(0);
    if (i >= nb * RS * P) return;
    const int p = i % P, r = (i / P) % RS, b = i / (P * RS);
    const int kw = r % KW, kh = (r / KW) % KH, c = r / (KW * KH);
    const int oh = p / OW, ow = p - oh * OW;
    const int y = oh * SH - PH + kh * DH, xx = ow * SW - PW + kw * DW;
    const bool in = y >= 0 && y < H && xx >= 0 && xx < W;
    col[i] = in ? x[(((size_t)(n0 + b) * C + c) * H + y) * W + xx] : 0.0f;
}

// gx[n0 + b][c][y][x] = sum of the col entries that im2col copied from (y, x): the adjoint of conv_im2col.
// One input row (b, c, y) per work-item; every tap adds its span into a private row buffer (no atomics).
__kernel void conv_col2im(const int8 g0, const int8 g1, const int n0, const int nb,
                          __global const float* restrict col, __global float* restrict gx)
{
    GEOM
    const int P = OH * OW;
    const int i = get_global_id(0);
    if (i >= nb * C * H) return;
    const int y = i % H, c = (i / H) % C, b = i / (H * C);
    float row[128];
    for (int x0 = 0; x0 < W; x0 += 128) {
        const int n = min(128, W - x0);
        for (int j = 0; j < n; ++j) row[j] = 0.0f;
        for (int kh = 0; kh < KH; ++kh) {
            const int ty = y + PH - kh * DH;
            if (ty < 0 || ty % SH != 0 || ty / SH >= OH) continue;
            const int oh = ty / SH;
            for (int kw = 0; kw < KW; ++kw) {
                __global const float* cr = col + ((size_t)b * C * KH * KW + (c * KH + kh) * KW + kw) * P + oh * OW;
                // Output columns ow with x0 <= ow * SW - PW + kw * DW < x0 + n.
                const int a0 = x0 + PW - kw * DW, a1 = x0 + n - 1 + PW - kw * DW;
                const int lo = max(0, a0 > 0 ? (a0 + SW - 1) / SW : 0);
                const int hi = min(OW - 1, a1 >= 0 ? a1 / SW : -1);
                const int off = -PW + kw * DW - x0;
                if (SW == 1) {
                    for (int ow = lo; ow <= hi; ++ow) row[ow + off] += cr[ow];
                } else {
                    for (int ow = lo; ow <= hi; ++ow) row[ow * SW + off] += cr[ow];
                }
            }
        }
        __global float* out = gx + (((size_t)(n0 + b) * C + c) * H + y) * W + x0;
        for (int j = 0; j < n; ++j) out[j] = row[j];
    }
}

// conv_col2im for GPUs: one input element (b, c, y, x) per work-item, dimension 0 along x, gathering the col
// entries of every tap that read it (no private row buffer, writes coalesced), consecutive work-items along x.
__kernel void conv_col2im_elem(const int8 g0, const int8 g1, const int n0, const int nb,
                               __global const float* restrict col, __global float* restrict gx)
{
    GEOM
    const int P = OH * OW;
    // One dimension, i = ((b·C + c)·H + y)·W + x < 2^31 over the chunk's nb samples (the host checks).
    const int i = get_global_id(0);
    if (i >= nb * C * H * W) return;
    const int xx = i % W, y = (i / W) % H, bc = i / (W * H);
    __global const float* cb = col + (size_t)bc * KH * KW * P;
    float acc = 0.0f;
    for (int kh = 0; kh < KH; ++kh) {
        const int ty = y + PH - kh * DH;
        if (ty < 0 || ty % SH != 0 || ty / SH >= OH) continue;
        const int oh = ty / SH;
        for (int kw = 0; kw < KW; ++kw) {
            const int tx = xx + PW - kw * DW;
            if (tx < 0 || tx % SW != 0 || tx / SW >= OW) continue;
            acc += cb[(size_t)(kh * KW + kw) * P + oh * OW + tx / SW];
        }
    }
    gx[(size_t)n0 * C * H * W + i] = acc;
}

// out[i] (+)= sum over b of part[b * len + i]; accumulate != 0 adds to what out holds.
__kernel void conv_sum_batches(const int len, const int count, const int accumulate,
                               __global const float* restrict part, __global float* restrict out)
{
    const int i = get_global_id(0);
    if (i >= len) return;
    float acc = accumulate ? out[i] : 0.0f;
    for (int b = 0; b < count; ++b) acc += part[(size_t)b * len + i];
    out[i] = acc;
}

// gb[f] = sum over n and p of go[n][f][p]: one work-group per f with a local-memory tree (GPUs). Launched with
// N = 1 and F = N·F it gives the partial sum of each (n, f) row instead (the `rows` candidate).
__kernel void conv_bias_grad_wg(const int N, const int F, const int P,
                                __global const float* restrict go, __global float* restrict gb,
                                __local float* red)
{
    const int f = get_group_id(0), t = get_local_id(0), T = get_local_size(0);
    float acc = 0.0f;
    for (int n = 0; n < N; ++n) {
        __global const float* row = go + ((size_t)n * F + f) * P;
        for (int p = t; p < P; p += T) acc += row[p];
    }
    red[t] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = T / 2; s > 0; s >>= 1) {
        if (t < s) red[t] += red[t + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t == 0) gb[f] = red[0];
}

// gb[f] as above, one work-item per f with float8 loads and no barriers (CPU OpenCL).
__kernel void conv_bias_grad_serial(const int N, const int F, const int P,
                                    __global const float* restrict go, __global float* restrict gb)
{
    const int f = get_global_id(0);
    if (f >= F) return;
    float8 acc8 = (float8)(0.0f);
    float acc = 0.0f;
    for (int n = 0; n < N; ++n) {
        __global const float* row = go + ((size_t)n * F + f) * P;
        int p = 0;
        for (; p + 8 <= P; p += 8) acc8 += vload8(0, row + p);
        for (; p < P; ++p) acc += row[p];
    }
    gb[f] = acc + (acc8.s0 + acc8.s1 + acc8.s2 + acc8.s3) + (acc8.s4 + acc8.s5 + acc8.s6 + acc8.s7);
}

// wr[c][f][kh][kw] = w[f][c][KH-1-kh][KW-1-kw]: the weights of the stride-1 grad_x convolution.
// One (c, f) filter per work-item.
__kernel void conv_flip_weights(const int F, const int C, const int KH, const int KW,
                                __global const float* restrict w, __global float* restrict wr)
{
    const int i = get_global_id(0);
    if (i >= F * C) return;
    const int f = i % F, c = i / F;
    __global const float* src = w + ((size_t)f * C + c) * KH * KW;
    __global float* dst = wr + (size_t)i * KH * KW;
    for (int t = 0; t < KH * KW; ++t) dst[t] = src[KH * KW - 1 - t];
}

// out[n][f][p] = act(out[n][f][p] + bias[f]) in place.
__kernel void conv_bias_act(const int F, const int P, const int total,
                            __global const float* restrict bias, const int has_bias, const int relu,
                            __global float* restrict out)
{
    const int i = get_global_id(0);
    if (i >= total) return;
    float v = out[i];
    if (has_bias) v += bias[(i / P) % F];
    if (relu) v = v < 0.0f ? 0.0f : v;
    out[i] = v;
}
