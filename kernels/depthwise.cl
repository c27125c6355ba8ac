// Depthwise convolution (one K x K filter per channel, w: C x 1 x K x K), forward and backward.
//
// Geometry as one int8: g = (N, C, H, W, OH, OW, S, P) plus the square kernel size K (a define for the
// local-memory kernels, an argument elsewhere).
//  * naive / tile: one output per work-item (1-D, or 3-D with 8x8 groups).
//  * rows: one output row per work-item, accumulated tap by tap over contiguous spans (CPU OpenCL).
//  * local: a 32x8 output tile per work-group with the input tile and halo in local memory (GPUs).
//  * block: a BY x VW register block of outputs per work-item, read from global memory (see below).
//  * blocked stride-2 grad_x: a 2 x 2 or 2 x 4 block of grad_x per work-item (see the last section).
// grad_w sums over "bands" (a sample and a range of output rows) into partials, then reduces them.
//
// Each build of this file compiles one family only: the row kernels (RK / RS), the local-memory kernels
// (KS), the register blocks (BK), the blocked stride-2 grad_x (GK), or, with none of those defined, the
// plain kernels. GPU drivers compile every kernel of a program when it is built, so fewer kernels per
// build keep the first call's build time down.

#define GEO                                                                                    \
    const int N = g.s0, C = g.s1, H = g.s2, W = g.s3, OH = g.s4, OW = g.s5, S = g.s6, P = g.s7;

// ------------------------------------------------------------------------------ row kernels (CPU OpenCL)
// Built per (RK = K, RS = stride), so their span loops have constant strides and trip counts the compiler
// can vectorise and unroll.
#if defined(RS)
#define ROW_S RS
#define ROW_K RK

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
#if ROW_S == 2
                // vload16 reads one column past the last tap: the vector loop stops where that is outside the row.
                const int hv = W - 2 + P - kw >= 0 ? min(hi, (W - 2 + P - kw) / 2) : -1;
                for (; ow + 8 <= hv + 1; ow += 8) a8 = fma(vload8(0, gr + ow), vload16(0, xr + 2 * ow).even, a8);
#endif
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

#elif !defined(KS) && !defined(BK) && !defined(GK)
// ------------------------------------------------------------------------------ plain kernels

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

#endif

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

// ------------------------------------------------------------------------------ register-block kernels
// Built per (BK = K, BS = stride, VW = outputs along a row, BY = output rows) with K <= 7 and stride 1 or 2.
// No local memory in the forward pass: a work-item keeps a BY x VW block of outputs in registers and reads
// each of the (BY - 1) * BS + BK input rows it needs once, as BK vectors (one per filter column), from
// global memory. VW = 1 gives adjacent work-items adjacent columns (coalesced on GPUs); VW = 8 and 16 give
// CPU OpenCL one float8 or float16 per row and tap.
#ifdef BK
#if VW == 1
typedef float vfloat;
#define VLOAD(p) (*(p))
#define VSTORE(v, p) (*(p) = (v))
#define VSPLAT(s) (s)
#elif VW == 4
typedef float4 vfloat;
#define VLOAD(p) vload4(0, p)
#define VSTORE(v, p) vstore4(v, 0, p)
#define VSPLAT(s) ((float4)(s))
#elif VW == 8
typedef float8 vfloat;
#define VLOAD(p) vload8(0, p)
#define VSTORE(v, p) vstore8(v, 0, p)
#define VSPLAT(s) ((float8)(s))
#elif VW == 16
typedef float16 vfloat;
#define VLOAD(p) vload16(0, p)
#define VSTORE(v, p) vstore16(v, 0, p)
#define VSPLAT(s) ((float16)(s))
#else
#error "VW must be 1, 4, 8 or 16"
#endif

// VLOADS(p) = (p[0], p[BS], ..., p[(VW - 1) * BS]); it reads p[0 .. VEXT].
#if BS == 1 || VW == 1
#define VLOADS(p) VLOAD(p)
#define VEXT ((VW - 1) * BS)
#elif BS == 2 && VW == 4
#define VLOADS(p) (vload8(0, p).even)
#define VEXT 7
#elif BS == 2 && VW == 8
#define VLOADS(p) (vload16(0, p).even)
#define VEXT 15
#else
#error "BS must be 1 or 2"
#endif

// Border blocks of VW > 1 load the VEXT + 1 columns at a clamped start and move each lane into place with a
// shuffle (lanes outside the image become zero), where the row is at least that wide.
#if VW == 4
typedef int4 ivec;
#define LANES ((int4)(0, 1, 2, 3))
#define VMASK(v) convert_uint4(v)
#elif VW == 8
typedef int8 ivec;
#define LANES ((int8)(0, 1, 2, 3, 4, 5, 6, 7))
#define VMASK(v) convert_uint8(v)
#elif VW == 16
typedef int16 ivec;
#define LANES ((int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
#define VMASK(v) convert_uint16(v)
#endif
#if VEXT == 3
#define VLOADL(p) vload4(0, p)
#elif VEXT == 7
#define VLOADL(p) vload8(0, p)
#elif VEXT == 15
#define VLOADL(p) vload16(0, p)
#endif

// The BY x VW output block at (oh0, ow0) of channel c. `mode` 1: every input column the block reads is
// inside the image, so rows load as plain vectors; 2: a border block of a row at least VEXT + 1 wide, loaded
// by shuffles; 0: each lane is loaded with a bounds check.
inline void dw_block(const int H, const int W, const int OH, const int OW, const int P, const int oh0, const int ow0,
                     __global const float* restrict xp, const float* wv, const float b, __global float* restrict op,
                     const int mode)
{
    const int ix0 = ow0 * BS - P;
    vfloat acc[BY];
#pragma unroll
    for (int j = 0; j < BY; ++j) acc[j] = VSPLAT(b);
#pragma unroll
    for (int r = 0; r < (BY - 1) * BS + BK; ++r) {
        const int y = oh0 * BS - P + r;
        if (y < 0 || y >= H) continue;
        __global const float* xr = xp + (size_t)y * W;
        vfloat xv[BK];
#pragma unroll
        for (int kw = 0; kw < BK; ++kw) {
            if (mode == 1) {
                xv[kw] = VLOADS(xr + ix0 + kw);
            }
#if VW > 1
            else if (mode == 2) {
                const int c0 = ix0 + kw, base = clamp(c0, 0, W - (VEXT + 1));
                const ivec col = c0 + LANES * BS;
                const vfloat v = shuffle(VLOADL(xr + base), VMASK((col - base) & VEXT));
                xv[kw] = select(VSPLAT(0.0f), v, col >= 0 && col < W);
            }
#endif
            else {
                float lane[VW];
#pragma unroll
                for (int l = 0; l < VW; ++l) {
                    const int xx = ix0 + l * BS + kw;
                    lane[l] = (xx >= 0 && xx < W) ? xr[xx] : 0.0f;
                }
#if VW == 1
                xv[kw] = lane[0];
#else
                xv[kw] = VLOAD(lane);
#endif
            }
        }
#pragma unroll
        for (int j = 0; j < BY; ++j) {
            const int kh = r - j * BS;
            if (kh >= 0 && kh < BK) {
#pragma unroll
                for (int kw = 0; kw < BK; ++kw) acc[j] = fma(xv[kw], VSPLAT(wv[kh * BK + kw]), acc[j]);
            }
        }
    }
    const int nv = min(VW, OW - ow0);
#pragma unroll
    for (int j = 0; j < BY; ++j) {
#if VW == 1
        if (oh0 + j >= OH) break;
#else
        // `continue`, not `break`: PoCL's LLVM does not fully unroll a loop with a second exit, and warned "loop
        // not unrolled" for every VW > 1 build. The one-column blocks (the GPU's) keep the `break`: a guard
        // measured 2-4 % slower there.
        if (oh0 + j >= OH) continue;
#endif
        __global float* o = op + (size_t)j * OW;
        if (nv == VW) {
            VSTORE(acc[j], o);
        } else {
#if VW == 1
            o[0] = acc[j];
#else
            float lane[VW];
            VSTORE(acc[j], lane);
            for (int l = 0; l < nv; ++l) o[l] = lane[l];
#endif
        }
    }
}

// The BY outputs of column ow from row oh0, each tap bounds-checked (edge columns).
inline void dw_col(const int H, const int W, const int OH, const int OW, const int P, const int oh0, const int ow,
                   __global const float* restrict xp, const float* wv, const float b, __global float* restrict op)
{
    for (int j = 0; j < BY && oh0 + j < OH; ++j) {
        float acc = b;
        for (int kh = 0; kh < BK; ++kh) {
            const int y = (oh0 + j) * BS - P + kh;
            if (y < 0 || y >= H) continue;
#pragma unroll
            for (int kw = 0; kw < BK; ++kw) {
                const int xx = ow * BS - P + kw;
                if (xx >= 0 && xx < W) acc = fma(xp[(size_t)y * W + xx], wv[kh * BK + kw], acc);
            }
        }
        op[(size_t)j * OW] = acc;
    }
}

// One BY x VW output block per work-item, work-items ordered (n, c, row block, column block); with XLOOP, one
// work-item per (n, c, row block) walks the row's column blocks (fewer work-items and index divisions, for
// CPU OpenCL).
__kernel void dw_fwd_block(const int8 g, __global const float* restrict x, __global const float* restrict w,
                           __global const float* restrict bias, const int has_bias, __global float* restrict out)
{
    const int N = g.s0, C = g.s1, H = g.s2, W = g.s3, OH = g.s4, OW = g.s5, P = g.s7;
    const int nxb = (OW + VW - 1) / VW, nyb = (OH + BY - 1) / BY;
    const int i = get_global_id(0);
#if XLOOP
    const int items = N * C * nyb, yb = i % nyb, nc = i / nyb, xb0 = 0, xb1 = nxb;
#else
    const int items = N * C * nyb * nxb, xb0 = i % nxb, xb1 = xb0 + 1, t = i / nxb, yb = t % nyb, nc = t / nyb;
#endif
    if (i < items) {
        const int oh0 = yb * BY, c = nc % C;
        float wv[BK * BK];
#pragma unroll
        for (int k = 0; k < BK * BK; ++k) wv[k] = w[c * BK * BK + k];
        const float b = has_bias ? bias[c] : 0.0f;
        __global const float* xp = x + (size_t)nc * H * W;
        __global float* orow = out + ((size_t)nc * OH + oh0) * OW;
#if XLOOP && BS == 1
        // Interior blocks from the first column whose window starts inside the row, the last one moved back
        // to end at the last interior column (it overlaps the one before), then the columns left at either
        // edge one at a time: on CPU OpenCL a bounds-checked border block costs several interior ones.
        const int lo = P, hs = min(OW - VW, W - BK - VEXT + P);
        if (lo <= hs) {
            for (int ow0 = lo;; ow0 += VW) {
                const int o = min(ow0, hs);
                dw_block(H, W, OH, OW, P, oh0, o, xp, wv, b, orow + o, 1);
                if (o == hs) break;
            }
            for (int ow = 0; ow < lo; ++ow) dw_col(H, W, OH, OW, P, oh0, ow, xp, wv, b, orow + ow);
            for (int ow = hs + VW; ow < OW; ++ow) dw_col(H, W, OH, OW, P, oh0, ow, xp, wv, b, orow + ow);
        } else
#endif
        for (int xb = xb0; xb < xb1; ++xb) {
            const int ow0 = xb * VW;
            __global float* op = orow + ow0;
            const int ix0 = ow0 * BS - P;
            if (VW > 1 && ix0 >= 0 && ix0 + BK - 1 + VEXT < W)
                dw_block(H, W, OH, OW, P, oh0, ow0, xp, wv, b, op, 1);
            else if (VW > 1 && W > VEXT)
                dw_block(H, W, OH, OW, P, oh0, ow0, xp, wv, b, op, 2);
            else
                dw_block(H, W, OH, OW, P, oh0, ow0, xp, wv, b, op, 0);
        }
    }
}

// grad_x by gathering: input pixel (y, x) sums grad_out at the outputs whose window covers it, which for
// stride BS are at most ceil(BK / BS) rows times as many columns; one pixel per work-item, no atomics.
__kernel void dw_bwd_x_gather(const int8 g, __global const float* restrict go, __global const float* restrict w,
                              __global float* restrict gx)
{
    const int C = g.s1, H = g.s2, W = g.s3, OH = g.s4, OW = g.s5, P = g.s7;
    // A 3-D range (column, row, plane): no index divisions but one.
    const int xx = get_global_id(0), y = get_global_id(1), nc = get_global_id(2);
    if (xx >= W || y >= H) return;
    const int c = nc % C;
    const size_t i = ((size_t)nc * H + y) * W + xx;
    __global const float* gp = go + (size_t)nc * OH * OW;
    __global const float* wp = w + c * BK * BK;
    // The last output row / column covering (y, xx); earlier ones are BS apart in the filter.
    const int oyh = (y + P) / BS, oxh = (xx + P) / BS;
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < (BK + BS - 1) / BS; ++j) {
        const int oy = oyh - j, kh = y + P - oy * BS;
        if (oy < 0 || oy >= OH || kh >= BK) continue;
#pragma unroll
        for (int q = 0; q < (BK + BS - 1) / BS; ++q) {
            const int ox = oxh - q, kw = xx + P - ox * BS;
            if (ox < 0 || ox >= OW || kw >= BK) continue;
            acc = fma(gp[oy * OW + ox], wp[kh * BK + kw], acc);
        }
    }
    gx[i] = acc;
}

#if BS == 2 && VW == 8
// grad_x of a stride-2 convolution for CPU OpenCL (built with the 8-wide blocks only): one input row (n, c, y) per work-item, 16 columns at a time.
// Column x0 + 2m + e (x0 even) reads grad_out column (x0 + 2m + e + P - kw) / 2 at the taps kw whose parity
// makes that exact, so the even and the odd columns of a block each take one float8 of grad_out per such
// tap; the two float8 sums are then interleaved into 16 columns.
__kernel void dw_bwd_x_s2(const int8 g, __global const float* restrict go, __global const float* restrict w,
                          __global float* restrict gx)
{
    const int N = g.s0, C = g.s1, H = g.s2, W = g.s3, OH = g.s4, OW = g.s5, P = g.s7;
    const int r = get_global_id(0);
    if (r >= N * C * H) return;
    const int y = r % H, nc = r / H, c = nc % C;
    float wv[BK * BK];
#pragma unroll
    for (int k = 0; k < BK * BK; ++k) wv[k] = w[c * BK * BK + k];
    __global const float* gp = go + (size_t)nc * OH * OW;
    __global float* gxr = gx + (size_t)r * W;
    for (int x0 = 0; x0 < W; x0 += 16) {
        float8 ae = (float8)(0.0f), ao = (float8)(0.0f);
#pragma unroll
        for (int kh = 0; kh < BK; ++kh) {
            const int ty = y + P - kh;
            if (ty < 0 || (ty & 1) || ty / 2 >= OH) continue;
            __global const float* gr = gp + (ty / 2) * OW;
#pragma unroll
            for (int kw = 0; kw < BK; ++kw) {
                const int e = (kw + P) & 1, o0 = (x0 + e + P - kw) / 2;
                float8 v;
                if (o0 >= 0 && o0 + 8 <= OW) {
                    v = vload8(0, gr + o0);
                } else {
                    float lane[8];
                    for (int m = 0; m < 8; ++m) lane[m] = (o0 + m >= 0 && o0 + m < OW) ? gr[o0 + m] : 0.0f;
                    v = vload8(0, lane);
                }
                if (e)
                    ao = fma(v, (float8)(wv[kh * BK + kw]), ao);
                else
                    ae = fma(v, (float8)(wv[kh * BK + kw]), ae);
            }
        }
        const float16 o = shuffle2(ae, ao, (uint16)(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15));
        if (x0 + 16 <= W) {
            vstore16(o, 0, gxr + x0);
        } else {
            float lane[16];
            vstore16(o, 0, lane);
            for (int i = 0; i < W - x0; ++i) gxr[x0 + i] = lane[i];
        }
    }
}
#endif

// One grad_w unit: the BY outputs of column ow from row oh0 of plane (n, c), whose (BY - 1) * BS + BK input
// rows are read once and feed every tap of acc.
inline void dw_w_unit(const int H, const int W, const int OH, const int OW, const int P, const int oh0, const int ow,
                      __global const float* restrict xp, __global const float* restrict gp, float* acc)
{
    float gv[BY];
#pragma unroll
    for (int j = 0; j < BY; ++j) gv[j] = oh0 + j < OH ? gp[(oh0 + j) * OW + ow] : 0.0f;
    const int ix0 = ow * BS - P;
#pragma unroll
    for (int r = 0; r < (BY - 1) * BS + BK; ++r) {
        const int y = oh0 * BS - P + r;
        if (y < 0 || y >= H) continue;
        __global const float* xr = xp + (size_t)y * W;
        float xv[BK];
#pragma unroll
        for (int kw = 0; kw < BK; ++kw) {
            const int xx = ix0 + kw;
            xv[kw] = (xx >= 0 && xx < W) ? xr[xx] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < BY; ++j) {
            const int kh = r - j * BS;
            if (kh >= 0 && kh < BK) {
#pragma unroll
                for (int kw = 0; kw < BK; ++kw) acc[kh * BK + kw] = fma(gv[j], xv[kw], acc[kh * BK + kw]);
            }
        }
    }
}

// grad_w partials: one work-group of 256 per (c, band), a band being `per_band` consecutive units of
// (n, row block, column) with the column fastest, so reads of grad_out and x are coalesced; `per_band` is
// a multiple of 256, so the work-items of a full band take as many units each. A work-item divides its
// first unit's index once and then steps the (n, row block, column) indices by 256 units at a time. The 256
// per-tap sums fold to 64 in local memory, then to one per tap: part[c][band][tap].
#define WG_W 256
__kernel __attribute__((reqd_work_group_size(WG_W, 1, 1)))
void dw_bwd_w_block(const int8 g, const int per_band, __global const float* restrict x,
                    __global const float* restrict go, __global float* restrict part)
{
    const int N = g.s0, C = g.s1, H = g.s2, W = g.s3, OH = g.s4, OW = g.s5, P = g.s7;
    __local float red[BK * BK * 64];
    __local float red4[BK * BK * 4];
    const int lid = get_local_id(0), c = get_group_id(0), band = get_group_id(1), bands = get_num_groups(1);
    const int nyb = (OH + BY - 1) / BY;
    const int units = N * nyb * OW;
    const int u1 = min(units, (band + 1) * per_band);
    const size_t plane_x = (size_t)H * W, plane_g = (size_t)OH * OW;
    __global const float* xc = x + (size_t)c * plane_x;
    __global const float* gc = go + (size_t)c * plane_g;
    float acc[BK * BK];
#pragma unroll
    for (int k = 0; k < BK * BK; ++k) acc[k] = 0.0f;
    int u = band * per_band + lid;
    int ow = u % OW, yb = (u / OW) % nyb, n = u / OW / nyb;
    const int dow = WG_W % OW, dyb = WG_W / OW;
    for (; u < u1; u += WG_W) {
        dw_w_unit(H, W, OH, OW, P, yb * BY, ow, xc + (size_t)n * C * plane_x, gc + (size_t)n * C * plane_g, acc);
        ow += dow;
        yb += dyb;
        if (ow >= OW) {
            ow -= OW;
            ++yb;
        }
        if (yb >= nyb) {
            n += yb / nyb;
            yb %= nyb;
        }
    }
    const int q = lid / 64, s = lid % 64;
    for (int p = 0; p < WG_W / 64; ++p) {
        if (q == p)
            for (int k = 0; k < BK * BK; ++k) red[k * 64 + s] = p == 0 ? acc[k] : red[k * 64 + s] + acc[k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int e = lid; e < BK * BK * 4; e += WG_W) {
        __local const float* rp = red + (e / 4) * 64 + (e % 4) * 16;
        float a = 0.0f;
        for (int m = 0; m < 16; ++m) a += rp[m];
        red4[e] = a;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    __global float* out = part + ((size_t)c * bands + band) * BK * BK;
    for (int k = lid; k < BK * BK; k += WG_W) out[k] = (red4[4 * k] + red4[4 * k + 1]) + (red4[4 * k + 2] + red4[4 * k + 3]);
}
#endif

// ------------------------------------------------------------------------------ blocked stride-2 grad_x
// Built per (GK = K <= 7, GC, GP = P & 1). With stride 2, input pixel (y, x) where y + P = 2t + e and
// x + P = 2u + f reads grad_out (t - m, u - q) at the tap (2m + e, 2q + f): each row parity e uses only the
// filter rows of that parity, each column parity only those columns. A work-item takes the 2 × 2·GC block
// of grad_x at even (y0, x0); P's parity fixes every row's and column's parity, and so the grad_out rows
// and columns it reads, at build time. The block loads the grad_out values it shares once (2 × (GC + 1)
// for K = 3), with no per-pixel tap tests or divisions.
#ifdef GK
#define GM ((GK + 1) / 2)
// GSTORE(o, p): the 2·GC floats of o to p.
#if GC == 1
#define GSTORE(o, p) vstore2(vload2(0, o), 0, p)
#elif GC == 2
#define GSTORE(o, p) vstore4(vload4(0, o), 0, p)
#else
#error "GC must be 1 or 2"
#endif

__kernel void dw_bwd_x_s2_block(const int8 g, __global const float* restrict go, __global const float* restrict w,
                                __global float* restrict gx)
{
    const int C = g.s1, H = g.s2, W = g.s3, OH = g.s4, OW = g.s5, P = g.s7;
    const int bx = get_global_id(0), by = get_global_id(1), nc = get_global_id(2);
    const int x0 = bx * 2 * GC, y0 = by * 2;
    if (x0 >= W || y0 >= H) return;
    const int c = nc % C;
    float wv[GK * GK];
#pragma unroll
    for (int k = 0; k < GK * GK; ++k) wv[k] = w[c * GK * GK + k];
    // gv[a][b] = grad_out (t0 + a, u0 + b): block row i (column j) reads row ((i + GP) >> 1) - m + GM - 1
    // of gv at filter row 2m + e (and likewise for columns); loads no block row reads are dropped by the
    // compiler.
    const int t0 = by + (P >> 1) - (GM - 1), u0 = bx * GC + (P >> 1) - (GM - 1);
    __global const float* gp = go + (size_t)nc * OH * OW;
    float gv[1 + GM][GC + GM];
#pragma unroll
    for (int a = 0; a < 1 + GM; ++a) {
        const int t = t0 + a;
        const bool rok = t >= 0 && t < OH;
#pragma unroll
        for (int b = 0; b < GC + GM; ++b) {
            const int u = u0 + b;
            gv[a][b] = (rok && u >= 0 && u < OW) ? gp[t * OW + u] : 0.0f;
        }
    }
    __global float* gxp = gx + ((size_t)nc * H + y0) * W + x0;
    const bool full = x0 + 2 * GC <= W;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (y0 + i >= H) break;
        const int e = (i + GP) & 1, ti = ((i + GP) >> 1) + GM - 1;
        float o[2 * GC];
#pragma unroll
        for (int j = 0; j < 2 * GC; ++j) {
            const int f = (j + GP) & 1, tj = ((j + GP) >> 1) + GM - 1;
            float acc = 0.0f;
#pragma unroll
            for (int m = 0; m < GM; ++m) {
                if (2 * m + e >= GK) break;
#pragma unroll
                for (int q = 0; q < GM; ++q) {
                    if (2 * q + f >= GK) break;
                    acc = fma(gv[ti - m][tj - q], wv[(2 * m + e) * GK + 2 * q + f], acc);
                }
            }
            o[j] = acc;
        }
        __global float* row = gxp + (size_t)i * W;
        if (full) {
            GSTORE(o, row);
        } else {
            for (int j = 0; j < 2 * GC && x0 + j < W; ++j) row[j] = o[j];
        }
    }
}
#endif
