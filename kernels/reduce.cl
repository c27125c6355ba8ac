// Reductions over the canonical view [O, R, I] of a contiguous tensor (reduce R, keep O and I), one pass per
// contiguous group of reduced axes. With G > 1 a pass writes partials [O, G, I] (each chunk of rc elements of
// R reduced separately) and a second pass folds G. Defines per build:
//   COMB(a, b)  the combine, valid on scalars and vectors (NaN-propagating select for max/min);
//   IDENT       its identity;  PRE(v) a map applied to loaded values (x*x for the sum of squares).
// The result is multiplied by `scale` (1, or 1/count for a mean; x*1 == x exactly in IEEE).
// Kernels:
//   red_row_wg    I == 1: work-groups of L per (o, g), float4 loads, a local-memory tree (GPUs);
//   red_row_chunk I == 1: one work-item per (o, g), float8 loads, no barriers (CPU OpenCL);
//   red_col       I > 1: one work-item per (o, g, V consecutive i), coalesced across i;
//   argmax_col / argmin_col: the first extreme index along R (a NaN wins, as in NumPy).

// YZ_BEGIN and GRID_LOOP come from kernels/prelude.cl.

#ifndef COMB
#define COMB(a, b) ((a) + (b))
#endif
#ifndef IDENT
#define IDENT 0.0f
#endif
#ifndef PRE
#define PRE(v) (v)
#endif
#ifndef V
#define V 1
#endif
#ifndef ALIGN4
#define ALIGN4 0
#endif

#ifndef KAHAN
#define KAHAN 0
#endif
// Compensated (Kahan) summation step for the serial column loop; the compensation is dropped once the sum
// is not finite, so infinities and NaN propagate as in a plain sum.
#define KSTEP(acc, comp, val, zero, T)                            \
    {                                                            \
        const T y_ = (val) - (comp);                              \
        const T t_ = (acc) + y_;                                  \
        comp = select((zero), (t_ - (acc)) - y_, isfinite(t_));  \
        acc = t_;                                                \
    }

// f16 storage of the input x (IN_HALF, kernels/prelude.cl): XT is its element type and XLD/XLD4/XLD8(k, p) load
// element k / vector k with vload(_half)N, so sums, means and extremes of f16 tensors accumulate in f32.
// Partials and outputs are f32. Without IN_HALF every load is the float load it always was.
#if IN_HALF
#define XT half
#define XLD(k, p) vload_half((k), (p))
#define XLD4(k, p) vload_half4((k), (p))
// Eight halves as two vload_half4: with vload_half8, the row max on PoCL (CPU) ended in a segmentation fault.
#define XLD8(k, p) ((float8)(vload_half4(2 * (k), (p)), vload_half4(2 * (k) + 1, (p))))
#else
#define XT float
#define XLD(k, p) ((p)[k])
#define XLD4(k, p) vload4((k), (p))
#define XLD8(k, p) vload8((k), (p))
#endif

#define RED4(a) COMB(COMB((a).s0, (a).s1), COMB((a).s2, (a).s3))
#define RED8(a) COMB(COMB(COMB((a).s0, (a).s1), COMB((a).s2, (a).s3)), COMB(COMB((a).s4, (a).s5), COMB((a).s6, (a).s7)))

__kernel void red_row_wg(const int O, const int R, const int rc, const int G, const float scale,
                         __global const float* x, __global float* out, const int out_off, __local float* sc) {
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    const int g = get_group_id(0);
    // Rows stride over the grid's y extent (capped at 65535 groups); uniform within a work-group.
    for (int o = get_global_id(1); o < O; o += get_global_size(1)) {
    const int start = min(R, g * rc);
    const int end = min(R, start + rc);
    __global const XT* row = (__global const XT*)x + o * R + start;
    const int len = end - start;
    const int n4 = len >> 2;
    float4 a4 = (float4)(IDENT);
#if ALIGN4
    // R and rc are multiples of 4 (the host rounds rc up), so every chunk starts 16-byte aligned.
    __global const float4* row4 = (__global const float4*)row;
    for (int k = lid; k < n4; k += L) a4 = COMB(a4, PRE(row4[k]));
#else
    for (int k = lid; k < n4; k += L) a4 = COMB(a4, PRE(XLD4(k, row)));
#endif
    float acc = RED4(a4);
    for (int i = (n4 << 2) + lid; i < len; i += L) acc = COMB(acc, PRE(XLD(i, row)));
    sc[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = L >> 1; s > 0; s >>= 1) {
        if (lid < s) sc[lid] = COMB(sc[lid], sc[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[out_off + o * G + g] = sc[0] * scale;
    barrier(CLK_LOCAL_MEM_FENCE);
    }
}

__kernel void red_row_chunk(const int R, const int rc, const int G, const int total, const float scale,
                            __global const float* x, __global float* out, const int out_off) {
    const int t = get_global_id(0);
    if (t >= total) return;
    const int o = t / G;
    const int g = t - o * G;
    const int start = min(R, g * rc);
    const int end = min(R, start + rc);
    __global const XT* row = (__global const XT*)x + o * R;
    float8 a8 = (float8)(IDENT);
    int i = start;
    for (; i + 8 <= end; i += 8) a8 = COMB(a8, PRE(XLD8(0, row + i)));
    float acc = RED8(a8);
    for (; i < end; ++i) acc = COMB(acc, PRE(XLD(i, row)));
    out[out_off + t] = acc * scale;
}

__kernel void red_col(const int O, const int R, const int I, const int rc, const int G, const float scale,
                      __global const float* x, __global float* out, const int out_off) {
    const int i = get_global_id(0) * V;
    if (i >= I) return;
    YZ_BEGIN(g, G, o, O)
    const int start = min(R, g * rc);
    const int end = min(R, start + rc);
    __global const XT* p = (__global const XT*)x + o * R * I + i;
#if V == 4
    // V == 4 only when I % 4 == 0: every load is 16-byte aligned (an f16 load reads row r's 4 halves).
#if IN_HALF
#define P4(k) vload_half4((k), p)
#else
    __global const float4* p4 = (__global const float4*)p;
#define P4(k) p4[k]
#endif
    const int I4 = I >> 2;
    float4 acc = (float4)(IDENT);
#if KAHAN
    float4 comp = (float4)(0.0f);
    for (int r = start; r < end; ++r) KSTEP(acc, comp, PRE(P4(r * I4)), (float4)(0.0f), float4);
#else
    for (int r = start; r < end; ++r) acc = COMB(acc, PRE(P4(r * I4)));
#endif
    vstore4(acc * scale, 0, out + out_off + (o * G + g) * I + i);
#else
    float acc = IDENT;
#if KAHAN
    float comp = 0.0f;
    for (int r = start; r < end; ++r) KSTEP(acc, comp, PRE(XLD(r * I, p)), 0.0f, float);
#else
    for (int r = start; r < end; ++r) acc = COMB(acc, PRE(XLD(r * I, p)));
#endif
    out[out_off + (o * G + g) * I + i] = acc * scale;
#endif
    }
}

#ifndef NB
#define NB 4
#endif

// I > 1 on CPU OpenCL: one work-item per (o, g, 8·NB consecutive i) with NB float8 accumulators, so each row
// step reads whole cache lines; requires I % (8·NB) == 0.
__kernel void red_col_blk(const int O, const int R, const int I, const int rc, const int G, const float scale,
                          __global const float* x, __global float* out, const int out_off) {
    const int i = get_global_id(0) * (8 * NB);
    if (i >= I) return;
    YZ_BEGIN(g, G, o, O)
    const int start = min(R, g * rc);
    const int end = min(R, start + rc);
    __global const XT* p = (__global const XT*)x + o * R * I + i;
    float8 acc[NB];
    float8 comp[NB];
    for (int k = 0; k < NB; ++k) {
        acc[k] = (float8)(IDENT);
        comp[k] = (float8)(0.0f);
    }
    for (int r = start; r < end; ++r) {
        for (int k = 0; k < NB; ++k) {
#if KAHAN
            KSTEP(acc[k], comp[k], PRE(XLD8(k, p + r * I)), (float8)(0.0f), float8);
#else
            acc[k] = COMB(acc[k], PRE(XLD8(k, p + r * I)));
#endif
        }
    }
    for (int k = 0; k < NB; ++k) vstore8(acc[k] * scale, k, out + out_off + (o * G + g) * I + i);
    }
}

// I > 1 on CPU OpenCL, streaming: one work-item per (o, g) reads its chunk of rows front to back (sequential
// memory, no strided walks) and folds each row into its own partial row out[o, g, :], which stays in cache.
// Requires I % 8 == 0. The caller folds G partial rows in a second pass.
__kernel void red_col_stream(const int O, const int R, const int I, const int rc, const int G, const float scale,
                             __global const float* x, __global float* out, const int out_off) {
    const int t = get_global_id(0);
    if (t >= O * G) return;
    const int o = t / G;
    const int g = t - o * G;
    const int start = min(R, g * rc);
    const int end = min(R, start + rc);
    __global float* q = out + out_off + t * I;
    const int i8 = I >> 3;
    for (int k = 0; k < i8; ++k) vstore8((float8)(IDENT), k, q);
    for (int r = start; r < end; ++r) {
        __global const XT* p = (__global const XT*)x + (o * R + r) * I;
        for (int k = 0; k < i8; ++k) vstore8(COMB(vload8(k, q), PRE(XLD8(k, p))), k, q);
    }
    for (int k = 0; k < i8; ++k) vstore8(vload8(k, q) * scale, k, q);
}

// The first index of the largest (argmax) or smallest (argmin) value along R; the first NaN if any.
#define ARG_KERNEL(name, BETTER)                                                                          \
    __kernel void name(const int O, const int R, const int I, __global const float* x, __global int* out) { \
        const int t = get_global_id(0);                                                                   \
        if (t >= O * I) return;                                                                           \
        const int o = t / I;                                                                              \
        const int i = t - o * I;                                                                          \
        __global const XT* p = (__global const XT*)x + o * R * I + i;                                     \
        float best = XLD(0, p);                                                                           \
        int bi = 0;                                                                                       \
        if (!isnan(best)) {                                                                               \
            for (int r = 1; r < R; ++r) {                                                                 \
                const float v = XLD(r * I, p);                                                            \
                if (isnan(v)) { bi = r; break; }                                                          \
                if (BETTER(v, best)) { best = v; bi = r; }                                                \
            }                                                                                             \
        }                                                                                                 \
        out[t] = bi;                                                                                      \
    }
#define GT(a, b) ((a) > (b))
#define LT(a, b) ((a) < (b))
ARG_KERNEL(argmax_col, GT)
ARG_KERNEL(argmin_col, LT)

#ifndef KMAX
#define KMAX 8
#endif

// Decomposes `rem` over up to 8 dimensions (innermost in .s0) into an element offset.
#define DECOMP(rank, shape, stride, rem, off)                         \
    for (int k = 0; k < KMAX; ++k) {                                  \
        if (k < rank) {                                               \
            const int sz = ((const int*)&shape)[k];                   \
            const int dq_ = rem / sz;                                 \
            off += (rem - dq_ * sz) * ((const int*)&stride)[k];       \
            rem = dq_;                                                \
        }                                                             \
    }

// DECOMP over dimensions 1..rank-1 (dimension 0 is walked by the caller).
#define DECOMP_FROM1(rank, shape, stride, rem, off)                   \
    for (int k = 1; k < KMAX; ++k) {                                  \
        if (k < rank) {                                               \
            const int sz = ((const int*)&shape)[k];                   \
            const int dq_ = rem / sz;                                 \
            off += (rem - dq_ * sz) * ((const int*)&stride)[k];       \
            rem = dq_;                                                \
        }                                                             \
    }

// The sum of v over a work-group of 256 (every item takes part), by a tree in `red`.
static inline float rts_sum256(__local float* red, const int lid, const float v) {
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 128; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return red[0];
}

// reduce_to_shape: sum a gradient over its broadcast axes. Kept axes (kshape, kstride) index the output; the
// reduced axes (rshape, rstride) are summed, R positions in all.
// rts_wg: G work-groups of 256 per output element (group o·G + g takes chunk g of the reduced positions), a
// strided loop plus a local tree (used when R >= 256). With G > 1 it writes partials [outputs, G] that rts_fold
// sums. RTS_V4: the innermost reduced axis is contiguous and every offset a multiple of 4, so it loads float4.
#ifndef RTS_V4
#define RTS_V4 0
#endif
#if RTS_V4
#define RTS_T float4
#else
#define RTS_T float
#endif
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void rts_wg(const int nk, const int8 kshape, const int8 kstride, const int nr, const int8 rshape, const int8 rstride,
            const int R, const int G, __global const float* grad, __global float* out) {
    const int gid = get_group_id(0);
    const int o = gid / G;
    const int g = gid - o * G;
    const int lid = get_local_id(0);
    int rem = o, base = 0;
    DECOMP(nk, kshape, kstride, rem, base)
    float acc = 0.0f;
    const int inner = rshape.s0;
    if (nr > 0 && inner >= 256) {
        // The innermost reduced axis is long: walk it contiguously, decomposing only the outer reduced index.
        const int istr = rstride.s0;
        const int outer = R / inner;
        const int oc = (outer + G - 1) / G;
        const int o0 = min(outer, g * oc);
        const int o1 = min(outer, o0 + oc);
#if RTS_V4
        float4 acc4 = (float4)(0.0f);
#endif
        for (int ro = o0; ro < o1; ++ro) {
            int q = ro, off = base;
            DECOMP_FROM1(nr, rshape, rstride, q, off)
#if RTS_V4
            __global const float4* p4 = (__global const float4*)(grad + off);
            for (int ri = lid; ri < (inner >> 2); ri += 256) acc4 += p4[ri];
#else
            for (int ri = lid; ri < inner; ri += 256) acc += grad[off + ri * istr];
#endif
        }
#if RTS_V4
        acc += (acc4.s0 + acc4.s1) + (acc4.s2 + acc4.s3);
#endif
    } else {
        const int rc = (R + G - 1) / G;
        const int r0 = min(R, g * rc);
        const int r1 = min(R, r0 + rc);
        for (int r = r0 + lid; r < r1; r += 256) {
            int q = r, off = base;
            DECOMP(nr, rshape, rstride, q, off)
            acc += grad[off];
        }
    }
    __local float red[256];
    const float total = rts_sum256(red, lid, acc);
    if (lid == 0) out[gid] = total;
}

// The second stage of rts_wg with G > 1: out[o] = Σ_g part[o·G + g].
__kernel void rts_fold(const int total, const int G, __global const float* part, __global float* out) {
    const int o = get_global_id(0);
    if (o >= total) return;
    float acc = 0.0f;
    for (int g = 0; g < G; ++g) acc += part[o * G + g];
    out[o] = acc;
}

// rts_flat: like rts_wg (G work-groups of 256 per output, partials [outputs, G] folded by rts_fold when
// G > 1), but group g takes a slice of rc units of the flattened reduced positions — rows of the innermost
// reduced axis laid end to end, in float4 units with RTS_V4 — and every work-item issues four independent
// loads per iteration (more bytes in flight for a pure read). A unit's row offset takes one division when at
// most two reduced axes remain (the common case), the general decomposition otherwise.
static inline int rts_unit_off(const int j, const int iu, const int istr, const int nr, const int8 rshape,
                               const int8 rstride, const int base) {
    const int row = j / iu;
    const int col = j - row * iu;
#if RTS_V4
    int off = base + (col << 2);
#else
    int off = base + col * istr;
#endif
    if (nr <= 2) {
        off += row * rstride.s1;
    } else {
        int q = row;
        DECOMP_FROM1(nr, rshape, rstride, q, off)
    }
    return off;
}

__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void rts_flat(const int nk, const int8 kshape, const int8 kstride, const int nr, const int8 rshape,
              const int8 rstride, const int R, const int G, const int rc, __global const float* grad,
              __global float* out) {
    const int gid = get_group_id(0);
    const int o = gid / G;
    const int g = gid - o * G;
    const int lid = get_local_id(0);
    int rem = o, base = 0;
    DECOMP(nk, kshape, kstride, rem, base)
    const int inner = rshape.s0;
    const int istr = rstride.s0;
#if RTS_V4
    const int iu = inner >> 2;
    float4 acc = (float4)(0.0f);
#define RTS_LOAD(off) (*(__global const float4*)(grad + (off)))
#else
    const int iu = inner;
    float acc = 0.0f;
#define RTS_LOAD(off) (grad[(off)])
#endif
    const int units = (R / inner) * iu;
    const int start = min(units, g * rc);
    const int end = min(units, start + rc);
    int j = start + lid;
    for (; j + 768 < end; j += 1024) {
        const int o0 = rts_unit_off(j, iu, istr, nr, rshape, rstride, base);
        const int o1 = rts_unit_off(j + 256, iu, istr, nr, rshape, rstride, base);
        const int o2 = rts_unit_off(j + 512, iu, istr, nr, rshape, rstride, base);
        const int o3 = rts_unit_off(j + 768, iu, istr, nr, rshape, rstride, base);
        const RTS_T v0 = RTS_LOAD(o0), v1 = RTS_LOAD(o1), v2 = RTS_LOAD(o2), v3 = RTS_LOAD(o3);
        acc += v0;
        acc += v1;
        acc += v2;
        acc += v3;
    }
    for (; j < end; j += 256) acc += RTS_LOAD(rts_unit_off(j, iu, istr, nr, rshape, rstride, base));
#undef RTS_LOAD
#if RTS_V4
    float a = (acc.s0 + acc.s1) + (acc.s2 + acc.s3);
#else
    float a = acc;
#endif
    __local float red[256];
    const float total = rts_sum256(red, lid, a);
    if (lid == 0) out[gid] = total;
}

// rts_item: one work-item per output element (used when R < 256).
__kernel void rts_item(const int total, const int nk, const int8 kshape, const int8 kstride, const int nr,
                       const int8 rshape, const int8 rstride, const int R, __global const float* grad,
                       __global float* out) {
    const int o = get_global_id(0);
    if (o >= total) return;
    int rem = o, base = 0;
    DECOMP(nk, kshape, kstride, rem, base)
    float acc = 0.0f;
    for (int r = 0; r < R; ++r) {
        int q = r, off = base;
        DECOMP(nr, rshape, rstride, q, off)
        acc += grad[off];
    }
    out[o] = acc;
}

// sqrt of the sum of `n` partial sums of squares (the global L2 norm's last step).
__kernel void sqrt_sum(const int n, __global const float* x, __global float* out) {
    if (get_global_id(0) != 0) return;
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += x[i];
    out[0] = sqrt(s);
}
