// Depthwise convolution (one K x K filter per channel, w: C x 1 x K x K), forward and backward.
//
// Geometry as one int8: g = (N, C, H, W, OH, OW, S, P) plus the square kernel size K (a define for the
// local-memory kernels, an argument elsewhere).
//  * naive / tile: one output per work-item (1-D, or 3-D with 8x8 groups).
//  * rows: one output row per work-item, accumulated tap by tap over contiguous spans (CPU OpenCL).
//  * local: a 32x8 output tile per work-group with the input tile and halo in local memory (GPUs).
// grad_w sums over "bands" (a sample and a range of output rows) into partials, then reduces them.

#define GEO                                                                                    \
    const int N = g.s0, C = g.s1, H = g.s2, W = g.s3, OH = g.s4, OW = g.s5, S = g.s6, P = g.s7;

// The row kernels are built per (K, stride) when RK / RS are defined, so their span loops have constant
// strides and trip counts the compiler can vectorise and unroll.
#ifdef RS
#define ROW_S RS
#define ROW_K RK
#else
#define ROW_S S
#define ROW_K K
#endif

__kernel void dw_fwd_naive(const int8 g, const int K, __global const float* restrict x, __global const float* restrict w,
                           __global const float* restrict bias, const int has_bias, __global float* restrict out)
{
    GEO
    const int i = get_global_id(0);
    if (i >= N * C * OH * OW) return;
    const int ow = i % OW, oh = (i / OW) % OH, nc = i / (OW * OH), c = nc % C;
    __global const float* xp = x + (size_t)nc * H * W;
    __global const float* wp = w + c * K * K;
    float acc = has_bias ? bias[c] : 0.0f;
    for (int kh = 0; kh < K; ++kh) {
        const int y = oh * S - P + kh;
        if (y < 0 || y >= H) continue;
        for (int kw = 0; kw < K; ++kw) {
            const int xx = ow * S - P + kw;
            if (xx >= 0 && xx < W) acc = fma(xp[y * W + xx], wp[kh * K + kw], acc);
        }
    }
    out[i] = acc;
}

// Same math on a 3-D range (OW, OH, N * C) with 8x8 work-groups and no local memory.
__kernel void dw_fwd_tile(const int8 g, const int K, __global const float* restrict x, __global const float* restrict w,
                          __global const float* restrict bias, const int has_bias, __global float* restrict out)
{
    GEO
    const int ow = get_global_id(0), oh = get_global_id(1), nc = get_global_id(2);
    if (ow >= OW || oh >= OH || nc >= N * C) return;
    const int c = nc % C;
    __global const float* xp = x + (size_t)nc * H * W;
    __global const float* wp = w + c * K * K;
    float acc = has_bias ? bias[c] : 0.0f;
    for (int kh = 0; kh < K; ++kh) {
        const int y = oh * S - P + kh;
        if (y < 0 || y >= H) continue;
        for (int kw = 0; kw < K; ++kw) {
            const int xx = ow * S - P + kw;
            if (xx >= 0 && xx < W) acc = fma(xp[y * W + xx], wp[kh * K + kw], acc);
        }
    }
    out[((size_t)nc * OH + oh) * OW + ow] = acc;
}

// One output row (n, c, oh) per work-item: initialise with the bias, then add each tap over the span of
// output columns whose input column is inside the image (a bounds-free inner loop the compiler vectorises).
__kernel void dw_fwd_rows(const int8 g, const int K, __global const float* restrict x, __global const float* restrict w,
                          __global const float* restrict bias, const int has_bias, __global float* restrict out)
{
    GEO
    (void)S;
    (void)K;
    const int r = get_global_id(0);
    if (r >= N * C * OH) return;
    const int oh = r % OH, nc = r / OH, c = nc % C;
    __global float* op = out + (size_t)r * OW;
    const float b = has_bias ? bias[c] : 0.0f;
    float row[128];
    for (int o0 = 0; o0 < OW; o0 += 128) {
        const int n = min(128, OW - o0);
        for (int o = 0; o < n; ++o) row[o] = b;
        for (int kh = 0; kh < ROW_K; ++kh) {
            const int y = oh * ROW_S - P + kh;
            if (y < 0 || y >= H) continue;
            __global const float* xr = x + ((size_t)nc * H + y) * W;
            for (int kw = 0; kw < ROW_K; ++kw) {
                const float wv = w[(c * ROW_K + kh) * ROW_K + kw];
                // Columns o with 0 <= (o0 + o) * ROW_S - P + kw < W.
                int lo = P - kw > 0 ? (P - kw + ROW_S - 1) / ROW_S - o0 : -o0;
                int hi = (W - 1 + P - kw) >= 0 ? (W - 1 + P - kw) / ROW_S - o0 : -1 - o0;
                lo = max(lo, 0);
                hi = min(hi, n - 1);
                if (ROW_S == 1) {
                    __global const float* xs = xr + o0 - P + kw;
                    for (int o = lo; o <= hi; ++o) row[o] = fma(xs[o], wv, row[o]);
                } else {
                    __global const float* xs = xr + o0 * ROW_S - P + kw;
                    for (int o = lo; o <= hi; ++o) row[o] = fma(xs[o * ROW_S], wv, row[o]);
                }
            }
        }
        for (int o = 0; o < n; ++o) op[o0 + o] = row[o];
    }
}

// gx[n][c][y][x] = sum over the taps that read (y, x) of go * w (gather, any stride).
__kernel void dw_bwd_x_naive(const int8 g, const int K, __global const float* restrict go, __global const float* restrict w,
                             __global float* restrict gx)
{
    GEO
    const int i = get_global_id(0);
    if (i >= N * C * H * W) return;
    const int xx = i % W, y = (i / W) % H, nc = i / (W * H), c = nc % C;
    __global const float* gp = go + (size_t)nc * OH * OW;
    float acc = 0.0f;
    for (int kh = 0; kh < K; ++kh) {
        const int ty = y + P - kh;
        if (ty < 0 || ty % S != 0 || ty / S >= OH) continue;
        for (int kw = 0; kw < K; ++kw) {
            const int tx = xx + P - kw;
            if (tx < 0 || tx % S != 0 || tx / S >= OW) continue;
            acc = fma(gp[(ty / S) * OW + tx / S], w[(c * K + kh) * K + kw], acc);
        }
    }
    gx[i] = acc;
}

// gx row (n, c, y) per work-item: every tap scatters its span of grad_out into a private row buffer, which
// the work-item owns (no atomics); any stride.
__kernel void dw_bwd_x_rows(const int8 g, const int K, __global const float* restrict go, __global const float* restrict w,
                            __global float* restrict gx)
{
    GEO
    (void)S;
    (void)K;
    const int r = get_global_id(0);
    if (r >= N * C * H) return;
    const int y = r % H, nc = r / H, c = nc % C;
    float row[128];
    for (int x0 = 0; x0 < W; x0 += 128) {
        const int n = min(128, W - x0);
        for (int i = 0; i < n; ++i) row[i] = 0.0f;
        for (int kh = 0; kh < ROW_K; ++kh) {
            const int ty = y + P - kh;
            if (ty < 0 || ty % ROW_S != 0 || ty / ROW_S >= OH) continue;
            __global const float* gr = go + ((size_t)nc * OH + ty / ROW_S) * OW;
            for (int kw = 0; kw < ROW_K; ++kw) {
                const float wv = w[(c * ROW_K + kh) * ROW_K + kw];
                // Output columns ow with x0 <= ow * S - P + kw < x0 + n.
                const int a = x0 + P - kw, b = x0 + n - 1 + P - kw;
                const int lo = max(0, a > 0 ? (a + ROW_S - 1) / ROW_S : 0);
                const int hi = min(OW - 1, b >= 0 ? b / ROW_S : -1);
                for (int ow = lo; ow <= hi; ++ow) {
                    const int i = ow * ROW_S - P + kw - x0;
                    row[i] = fma(gr[ow], wv, row[i]);
                }
            }
        }
        __global float* out = gx + (size_t)r * W + x0;
        for (int i = 0; i < n; ++i) out[i] = row[i];
    }
}

// wf[c][kh][kw] = w[c][K-1-kh][K-1-kw]: grad_x of a stride-1 depthwise convolution is the forward
// convolution of grad_out with the flipped filter and padding K-1-P.
__kernel void dw_flip(const int C, const int K, __global const float* restrict w, __global float* restrict wf)
{
    const int i = get_global_id(0);
    if (i >= C * K * K) return;
    const int kw = i % K, kh = (i / K) % K, c = i / (K * K);
    wf[i] = w[(c * K + (K - 1 - kh)) * K + (K - 1 - kw)];
}

// gw[c][kh][kw] = sum over n, oh, ow: one work-item per weight (small C*K*K, long sums).
__kernel void dw_bwd_w_naive(const int8 g, const int K, __global const float* restrict x, __global const float* restrict go,
                             __global float* restrict gw)
{
    GEO
    const int i = get_global_id(0);
    if (i >= C * K * K) return;
    const int kw = i % K, kh = (i / K) % K, c = i / (K * K);
    float acc = 0.0f;
    for (int n = 0; n < N; ++n) {
        __global const float* xp = x + ((size_t)n * C + c) * H * W;
        __global const float* gp = go + ((size_t)n * C + c) * OH * OW;
        for (int oh = 0; oh < OH; ++oh) {
            const int y = oh * S - P + kh;
            if (y < 0 || y >= H) continue;
            for (int ow = 0; ow < OW; ++ow) {
                const int xx = ow * S - P + kw;
                if (xx >= 0 && xx < W) acc = fma(gp[oh * OW + ow], xp[y * W + xx], acc);
            }
        }
    }
    gw[i] = acc;
}

// part[c][band][kh * K + kw] for band = n * bands_per + b covering output rows [b * rows, (b + 1) * rows):
// one work-item per (c, band), every tap, bounds-free spans (CPU OpenCL).
__kernel void dw_bwd_w_rows(const int8 g, const int K, const int bands_per, const int rows,
                            __global const float* restrict x, __global const float* restrict go,
                            __global float* restrict part)
{
    GEO
    (void)S;
    (void)K;
    const int c = get_global_id(0), band = get_global_id(1);
    if (c >= C || band >= N * bands_per) return;
    const int n = band / bands_per, b = band % bands_per;
    __global const float* xp = x + ((size_t)n * C + c) * H * W;
    __global const float* gp = go + ((size_t)n * C + c) * OH * OW;
    __global float* out = part + ((size_t)c * N * bands_per + band) * ROW_K * ROW_K;
    for (int kh = 0; kh < ROW_K; ++kh)
        for (int kw = 0; kw < ROW_K; ++kw) {
            float acc = 0.0f;
            const int lo = max(0, P - kw > 0 ? (P - kw + ROW_S - 1) / ROW_S : 0);
            const int hi = min(OW - 1, W - 1 + P - kw >= 0 ? (W - 1 + P - kw) / ROW_S : -1);
            for (int oh = b * rows; oh < min(OH, (b + 1) * rows); ++oh) {
                const int y = oh * ROW_S - P + kh;
                if (y < 0 || y >= H) continue;
                __global const float* gr = gp + oh * OW;
                __global const float* xr = xp + y * W - P + kw;
                // Eight independent partial sums: a single running sum would serialise on the FMA latency
                // (no reassociation without fast-math).
                float8 a8 = (float8)(0.0f);
                int ow = lo;
                for (; ow + 8 <= hi + 1; ow += 8) {
                    const float8 gv = vload8(0, gr + ow);
#if ROW_S == 1
                    const float8 xv = vload8(0, xr + ow);
#else
                    __global const float* xq = xr + ow * ROW_S;
                    const float8 xv = (float8)(xq[0], xq[ROW_S], xq[2 * ROW_S], xq[3 * ROW_S], xq[4 * ROW_S], xq[5 * ROW_S],
                                               xq[6 * ROW_S], xq[7 * ROW_S]);
#endif
                    a8 = fma(gv, xv, a8);
                }
                for (; ow <= hi; ++ow) acc = fma(gr[ow], xr[ow * ROW_S], acc);
                acc += (a8.s0 + a8.s1) + (a8.s2 + a8.s3) + (a8.s4 + a8.s5) + (a8.s6 + a8.s7);
            }
            out[kh * ROW_K + kw] = acc;
        }
}

// gw[c][t] = sum over the bands of part[c][band][t].
__kernel void dw_reduce_weight(const int C, const int KK, const int bands, __global const float* restrict part,
                               __global float* restrict gw)
{
    const int i = get_global_id(0);
    if (i >= C * KK) return;
    const int c = i / KK, t = i % KK;
    float acc = 0.0f;
    for (int b = 0; b < bands; ++b) acc += part[((size_t)c * bands + b) * KK + t];
    gw[i] = acc;
}

// ------------------------------------------------------------------------------ local-memory kernels (GPU)
#ifdef KS
#define TW 32
#define TH 8
#define IW ((TW - 1) * SS + KS)
#define IH ((TH - 1) * SS + KS)

// A 32x8 output tile of one (n, c) per work-group; the input tile with its halo is staged in local memory.
__kernel __attribute__((reqd_work_group_size(TW, TH, 1)))
void dw_fwd_local(const int8 g, __global const float* restrict x, __global const float* restrict w,
                  __global const float* restrict bias, const int has_bias, __global float* restrict out)
{
    const int N = g.s0, C = g.s1, H = g.s2, W = g.s3, OH = g.s4, OW = g.s5, P = g.s7;
    __local float tile[IH * IW];
    const int lx = get_local_id(0), ly = get_local_id(1), lid = ly * TW + lx;
    const int ow0 = get_group_id(0) * TW, oh0 = get_group_id(1) * TH, nc = get_group_id(2);
    const int c = nc % C;
    __global const float* xp = x + (size_t)nc * H * W;
    const int y0 = oh0 * SS - P, x0 = ow0 * SS - P;
    for (int i = lid; i < IH * IW; i += TW * TH) {
        const int ty = i / IW, tx = i % IW;
        const int y = y0 + ty, xx = x0 + tx;
        tile[i] = (y >= 0 && y < H && xx >= 0 && xx < W) ? xp[y * W + xx] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float wv[KS * KS];
#pragma unroll
    for (int t = 0; t < KS * KS; ++t) wv[t] = w[c * KS * KS + t];
    float acc = has_bias ? bias[c] : 0.0f;
#pragma unroll
    for (int kh = 0; kh < KS; ++kh)
#pragma unroll
        for (int kw = 0; kw < KS; ++kw) acc = fma(tile[(ly * SS + kh) * IW + lx * SS + kw], wv[kh * KS + kw], acc);
    const int oh = oh0 + ly, ow = ow0 + lx;
    if (oh < OH && ow < OW && nc < N * C) out[((size_t)nc * OH + oh) * OW + ow] = acc;
}

// grad_w partials: one work-group of 256 per (c, band); every work-item accumulates all taps over its share
// of the band's output positions, then one local tree per tap.
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void dw_bwd_weight_local(const int8 g, const int bands_per, const int rows,
                         __global const float* restrict x, __global const float* restrict go,
                         __global float* restrict part)
{
    const int N = g.s0, C = g.s1, H = g.s2, W = g.s3, OH = g.s4, OW = g.s5, P = g.s7;
    __local float red[256];
    const int lid = get_local_id(0), c = get_group_id(0), band = get_group_id(1);
    const int n = band / bands_per, b = band % bands_per;
    const int r0 = b * rows, r1 = min(OH, (b + 1) * rows);
    __global const float* xp = x + ((size_t)n * C + c) * H * W;
    __global const float* gp = go + ((size_t)n * C + c) * OH * OW;
    float acc[KS * KS];
#pragma unroll
    for (int t = 0; t < KS * KS; ++t) acc[t] = 0.0f;
    const int cnt = (r1 - r0) * OW;
    for (int i = lid; i < cnt; i += 256) {
        const int oh = r0 + i / OW, ow = i % OW;
        const float gv = gp[oh * OW + ow];
#pragma unroll
        for (int kh = 0; kh < KS; ++kh) {
            const int y = oh * SS - P + kh;
#pragma unroll
            for (int kw = 0; kw < KS; ++kw) {
                const int xx = ow * SS - P + kw;
                if (y >= 0 && y < H && xx >= 0 && xx < W) acc[kh * KS + kw] = fma(gv, xp[y * W + xx], acc[kh * KS + kw]);
            }
        }
    }
    __global float* out = part + ((size_t)c * N * bands_per + band) * KS * KS;
    for (int t = 0; t < KS * KS; ++t) {
        red[lid] = acc[t];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = 128; s > 0; s >>= 1) {
            if (lid < s) red[lid] += red[lid + s];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (lid == 0) out[t] = red[0];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}
#endif
