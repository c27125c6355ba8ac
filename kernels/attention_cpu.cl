// Scaled dot-product attention for CPU OpenCL: the arithmetic of kernels/attention.cl laid out for a CPU core.
// One work-item owns VW rows (query rows forward and for dq, key rows for dk/dv), held across the VW lanes of
// one float vector: its operand rows are stored transposed in private memory (element d of row r at d·VW + r),
// so every step is a vector FMA of a lane vector with one broadcast element of the streamed operand, and the
// online softmax (running max, sum, rescale) is lane-wise vector arithmetic with no horizontal sums. Keys (or
// queries) stream KB at a time: KB independent accumulators per step, one rescale per block. No local memory
// and no barriers, so a work-group of one item runs as plain vector code.
//
// Rows past S (the last block's spare lanes) compute row S − 1 again and are not written; keys past S and keys
// a causal row may not see get probability 0. The first key block holds key 0, which every row sees, so the
// running max is finite from the first block on.
//
// Defines: HD (head dimension, ≤ 256), VW (lanes: 4, 8 or 16), KB (keys per block).

#ifndef HD
#define HD 64
#endif
#ifndef VW
#define VW 8
#endif
#ifndef KB
#define KB 8
#endif

// HSUM(t): the sum of a vf's lanes as a tree of halves.
#define HSUM4(t) (((t).x + (t).y) + ((t).z + (t).w))
#if VW == 16
#define HSUM(t) HSUM4(((t).lo.lo + (t).lo.hi) + ((t).hi.lo + (t).hi.hi))
#elif VW == 8
#define HSUM(t) HSUM4((t).lo + (t).hi)
#else
#define HSUM(t) HSUM4(t)
#endif
#if VW == 16
#define vf float16
#define vi int16
#define VLOAD vload16
#define VSTORE vstore16
#define LANES ((int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
#elif VW == 8
#define vf float8
#define vi int8
#define VLOAD vload8
#define VSTORE vstore8
#define LANES ((int8)(0, 1, 2, 3, 4, 5, 6, 7))
#else
#define vf float4
#define vi int4
#define VLOAD vload4
#define VSTORE vstore4
#define LANES ((int4)(0, 1, 2, 3))
#endif

// Loads rows [r0, r0 + VW) of the [S, HD] matrix `src` (rows past S repeat row S − 1), times `mul`, into the
// transposed private array `dst[HD·VW]`.
#define LOAD_T(dst, src, r0, mul)                                          \
    for (int r_ = 0; r_ < VW; ++r_) {                                      \
        __global const float* p_ = (src) + (size_t)min((r0) + r_, S - 1) * HD; \
        for (int d_ = 0; d_ < HD; ++d_) (dst)[d_ * VW + r_] = p_[d_] * (mul); \
    }

// Writes the transposed private rows `src` times `mul` back to rows [r0, min(r0 + VW, S)) of `dst`.
#define STORE_T(dst, src, r0, mul)                                  \
    for (int r_ = 0; r_ < VW && (r0) + r_ < S; ++r_) {              \
        __global float* p_ = (dst) + (size_t)((r0) + r_) * HD;      \
        for (int d_ = 0; d_ < HD; ++d_) p_[d_] = (src)[d_ * VW + r_] * (mul); \
    }

// The index of streamed row j of the block at b0, clamped into [0, S) so that spare rows read valid memory.
#define ROW(b0, j) ((size_t)min((b0) + (j), S - 1) * HD)

// The backward's two products of a block: s[j] = Σ_d at[d]·ap[row j, d] and dp[j] = Σ_d bt[d]·bp[row j, d]
// for the KB streamed rows from b0, `at` and `bt` the transposed private rows.
#define TWO_DOTS(s, dp, at, ap, bt, bp, b0)                      \
    for (int j_ = 0; j_ < KB; ++j_) {                            \
        s[j_] = (vf)(0.0f);                                      \
        dp[j_] = (vf)(0.0f);                                     \
    }                                                            \
    for (int d_ = 0; d_ < HD; ++d_) {                            \
        const vf a_ = VLOAD(d_, at);                             \
        const vf b_ = VLOAD(d_, bt);                             \
        for (int j_ = 0; j_ < KB; ++j_) {                        \
            s[j_] += a_ * (ap)[ROW(b0, j_) + d_];                \
            dp[j_] += b_ * (bp)[ROW(b0, j_) + d_];               \
        }                                                        \
    }

__kernel void attn_fwd_lanes(const int BH, const int S, const int causal, const float scale,
                             __global const float* q, __global const float* k, __global const float* v,
                             __global float* o, __global float* lse) {
    const int nqb = (S + VW - 1) / VW;
    const int gid = get_global_id(0);
    if (gid >= BH * nqb) return;
    const int bh = gid / nqb;
    const int q0 = (gid - bh * nqb) * VW;
    const size_t base = (size_t)bh * S * HD;
    __global const float* kb = k + base;
    __global const float* vb = v + base;
    float qt[HD * VW];
    float acc[HD * VW];
    LOAD_T(qt, q + base, q0, scale)
    for (int i = 0; i < HD * VW; ++i) acc[i] = 0.0f;
    const vi rows = (vi)(q0) + LANES;
    vf m = (vf)(-INFINITY);
    vf l = (vf)(0.0f);
    const int kend = causal ? min(S, q0 + VW) : S;
    for (int k0 = 0; k0 < kend; k0 += KB) {
        vf s[KB];
        for (int j = 0; j < KB; ++j) s[j] = (vf)(0.0f);
        for (int dd = 0; dd < HD; ++dd) {
            const vf qd = VLOAD(dd, qt);
            for (int j = 0; j < KB; ++j) s[j] += qd * kb[ROW(k0, j) + dd];
        }
        vf mn = m;
        for (int j = 0; j < KB; ++j) {
            const int key = k0 + j;
            const vi seen = causal ? ((vi)(key) <= rows) : (vi)(-1);
            s[j] = key < S ? select((vf)(-INFINITY), s[j], seen) : (vf)(-INFINITY);
            mn = fmax(mn, s[j]);
        }
        const vf corr = exp(m - mn);
        m = mn;
        l *= corr;
        for (int j = 0; j < KB; ++j) {
            s[j] = exp(s[j] - mn);
            l += s[j];
        }
        for (int dd = 0; dd < HD; ++dd) {
            vf a = VLOAD(dd, acc) * corr;
            for (int j = 0; j < KB; ++j) a += s[j] * vb[ROW(k0, j) + dd];
            VSTORE(a, dd, acc);
        }
    }
    float lv[VW];
    VSTORE(1.0f / l, 0, lv);
    float mv[VW];
    VSTORE(m + log(l), 0, mv);
    for (int r = 0; r < VW && q0 + r < S; ++r) {
        __global float* op = o + base + (size_t)(q0 + r) * HD;
        for (int dd = 0; dd < HD; ++dd) op[dd] = acc[dd * VW + r] * lv[r];
        lse[(size_t)bh * S + q0 + r] = mv[r];
    }
}

// dQ: lanes are query rows; ds = p·(dO·v − delta), dq = scale·Σ ds·k.
__kernel void attn_dq_lanes(const int BH, const int S, const int causal, const float scale, __global const float* q,
                            __global const float* k, __global const float* v, __global const float* g,
                            __global const float* lse, __global const float* delta, __global float* dq) {
    const int nqb = (S + VW - 1) / VW;
    const int gid = get_global_id(0);
    if (gid >= BH * nqb) return;
    const int bh = gid / nqb;
    const int q0 = (gid - bh * nqb) * VW;
    const size_t base = (size_t)bh * S * HD;
    __global const float* kb = k + base;
    __global const float* vb = v + base;
    float qt[HD * VW];
    float gt[HD * VW];
    float acc[HD * VW];
    LOAD_T(qt, q + base, q0, scale)
    LOAD_T(gt, g + base, q0, 1.0f)
    for (int i = 0; i < HD * VW; ++i) acc[i] = 0.0f;
    float lr[VW];
    float dr[VW];
    for (int r = 0; r < VW; ++r) {
        const size_t row = (size_t)bh * S + min(q0 + r, S - 1);
        lr[r] = lse[row];
        dr[r] = delta[row];
    }
    const vf lv = VLOAD(0, lr);
    const vf dv = VLOAD(0, dr);
    const vi rows = (vi)(q0) + LANES;
    const int kend = causal ? min(S, q0 + VW) : S;
    for (int k0 = 0; k0 < kend; k0 += KB) {
        vf s[KB];
        vf dp[KB];
        TWO_DOTS(s, dp, qt, kb, gt, vb, k0)
        for (int j = 0; j < KB; ++j) {
            const int key = k0 + j;
            const vi seen = causal ? ((vi)(key) <= rows) : (vi)(-1);
            const vf ds = exp(s[j] - lv) * (dp[j] - dv);
            s[j] = key < S ? select((vf)(0.0f), ds, seen) : (vf)(0.0f);
        }
        for (int dd = 0; dd < HD; ++dd) {
            vf a = VLOAD(dd, acc);
            for (int j = 0; j < KB; ++j) a += s[j] * kb[ROW(k0, j) + dd];
            VSTORE(a, dd, acc);
        }
    }
    STORE_T(dq + base, acc, q0, scale)
}

// dK, dV: lanes are key rows, queries stream KB at a time; dv = Σ p·dO, dk = scale·Σ ds·q.
__kernel void attn_dkv_lanes(const int BH, const int S, const int causal, const float scale, __global const float* q,
                             __global const float* k, __global const float* v, __global const float* g,
                             __global const float* lse, __global const float* delta, __global float* dk,
                             __global float* dv) {
    const int nkb = (S + VW - 1) / VW;
    const int gid = get_global_id(0);
    if (gid >= BH * nkb) return;
    const int bh = gid / nkb;
    const int j0 = (gid - bh * nkb) * VW;
    const size_t base = (size_t)bh * S * HD;
    __global const float* qb = q + base;
    __global const float* gb = g + base;
    __global const float* lb = lse + (size_t)bh * S;
    __global const float* db = delta + (size_t)bh * S;
    float kt[HD * VW];
    float vt[HD * VW];
    float ak[HD * VW];
    float av[HD * VW];
    LOAD_T(kt, k + base, j0, scale)
    LOAD_T(vt, v + base, j0, 1.0f)
    for (int i = 0; i < HD * VW; ++i) {
        ak[i] = 0.0f;
        av[i] = 0.0f;
    }
    const vi keys = (vi)(j0) + LANES;
    for (int i0 = causal ? j0 : 0; i0 < S; i0 += KB) {
        vf s[KB];
        vf dp[KB];
        TWO_DOTS(s, dp, kt, qb, vt, gb, i0)
        for (int i = 0; i < KB; ++i) {
            const int qi = min(i0 + i, S - 1);
            const vi seen = causal ? ((vi)(i0 + i) >= keys) : (vi)(-1);
            const vf p = i0 + i < S ? select((vf)(0.0f), exp(s[i] - lb[qi]), seen) : (vf)(0.0f);
            s[i] = p;
            dp[i] = p * (dp[i] - db[qi]);
        }
        for (int dd = 0; dd < HD; ++dd) {
            vf a = VLOAD(dd, av);
            vf b = VLOAD(dd, ak);
            for (int i = 0; i < KB; ++i) {
                a += s[i] * gb[ROW(i0, i) + dd];
                b += dp[i] * qb[ROW(i0, i) + dd];
            }
            VSTORE(a, dd, av);
            VSTORE(b, dd, ak);
        }
    }
    STORE_T(dk + base, ak, j0, scale)
    STORE_T(dv + base, av, j0, 1.0f)
}

// Decode, one work-item per (bh, chunk) of the cache, vectorised along the head dimension (HD a multiple of VW):
// KB keys are scored at a time (KB independent dot products), their probabilities taken as one vector and the
// accumulator rescaled once per block. With one chunk (NC = 1) the item writes the normalised output row to `o`
// and no combine pass is needed; otherwise the chunk's (max, sum, accumulator) go to `part` as for
// attn_decode_item in kernels/attention.cl.
__kernel void attn_decode_lanes(const int BH, const int C, const int L, const int NC, const float scale,
                                __global const float* q, __global const float* k, __global const float* v,
                                __global float* part, __global float* o) {
    const int gid = get_global_id(0);
    if (gid >= BH * NC) return;
    const int bh = gid / NC;
    const int ch = gid - bh * NC;
    const int CL = (L + NC - 1) / NC;
    const int j0 = ch * CL;
    const int j1 = min(L, j0 + CL);
    vf qv[HD / VW];
    vf acc[HD / VW];
    for (int i = 0; i < HD / VW; ++i) {
        qv[i] = VLOAD(i, q + (size_t)bh * HD) * scale;
        acc[i] = (vf)(0.0f);
    }
    float m = -INFINITY;
    float l = 0.0f;
    __global const float* kb = k + (size_t)bh * C * HD;
    __global const float* vb = v + (size_t)bh * C * HD;
    for (int b0 = j0; b0 < j1; b0 += KB) {
        float s[KB];
        float mn = m;
        for (int j = 0; j < KB; ++j) {
            __global const float* kp = kb + (size_t)min(b0 + j, j1 - 1) * HD;
            vf t = qv[0] * VLOAD(0, kp);
            for (int i = 1; i < HD / VW; ++i) t += qv[i] * VLOAD(i, kp);
            const float sj = HSUM(t);
            s[j] = b0 + j < j1 ? sj : -INFINITY;
            mn = fmax(mn, s[j]);
        }
        const float corr = exp(m - mn);
        m = mn;
        l *= corr;
#if KB == 16
        // The block's exponentials as one vector call, which CPU compilers lower to vector code.
        const float16 e16 = exp(vload16(0, s) - mn);
        vstore16(e16, 0, s);
        l += HSUM4((e16.lo.lo + e16.lo.hi) + (e16.hi.lo + e16.hi.hi));
#elif KB == 8
        const float8 e8 = exp(vload8(0, s) - mn);
        vstore8(e8, 0, s);
        l += HSUM4(e8.lo + e8.hi);
#else
        for (int j = 0; j < KB; ++j) {
            s[j] = exp(s[j] - mn);
            l += s[j];
        }
#endif
        for (int i = 0; i < HD / VW; ++i) {
            vf a = acc[i] * corr;
            for (int j = 0; j < KB; ++j) a += s[j] * VLOAD(i, vb + (size_t)min(b0 + j, j1 - 1) * HD);
            acc[i] = a;
        }
    }
    if (NC == 1) {
        const float il = l > 0.0f ? 1.0f / l : 0.0f;
        for (int i = 0; i < HD / VW; ++i) VSTORE(acc[i] * il, i, o + (size_t)bh * HD);
        return;
    }
    __global float* pp = part + (size_t)gid * (HD + 2);
    pp[0] = m;
    pp[1] = l;
    for (int i = 0; i < HD / VW; ++i) VSTORE(acc[i], i, pp + 2);
}
