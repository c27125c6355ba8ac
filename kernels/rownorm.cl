// Row normalisation in one launch: layer_norm (CENTER 1) and rms_norm (CENTER 0) over rows of D contiguous
// elements. Per row: the statistics, then y = (x − mean)·rstd·γ + β (rms: y = x·rstd·γ), and the saved mean
// (0 for rms) and rstd = 1/√(var + ε) (rms: 1/√(mean(x²) + ε)) that the backward uses. Kernels:
//   rn_row_wg:   one work-group of L items per row, local-memory trees; x is read twice (GPUs);
//   rn_row_reg:  one work-group per row holding the row in registers (RN_K values per item, D ≤ RN_K·L), so
//                x is read once and written once; the mean is shifted as below, the variance the two-pass
//                Σ(x − mean)² over the held values; with RN_V4 (D % 4 == 0) every access moves four
//                elements, with RN_V8 (f16 rows, D % 8 == 0) eight halves held raw (GPUs);
//   rn_row_item: one work-item per row, float8 loads along the row when D % 8 == 0 (VEC8), no barriers; the
//                second read finds the row in the item's cache (CPU OpenCL).
// The streaming kernels (wg, item) use shifted sums: with K the row's first element (0 when not finite), they
// sum d = x − K and d², so mean = K + Σd/D and var = Σd²/D − (Σd/D)², which stays accurate when the mean is
// large against the spread (the cancellation happens on the small d, never on the raw values).
// f16 storage through the prelude's LDX/STX: IN_HALF for x, A_HALF for γ, B_HALF for β, OUT_HALF for y; the
// statistics are f32, the maths is f32 and an f16 output is rounded once. γ and β are read only when has_gamma
// and has_beta are set (any buffer stands in otherwise).

#ifndef CENTER
#define CENTER 1
#endif
#ifndef RN_K
#define RN_K 1
#endif
#ifndef VEC8
#define VEC8 0
#endif
#ifndef RN_V4
#define RN_V4 0
#endif
#ifndef RN_V8
#define RN_V8 0
#endif
// rn_row_reg holds RN_N values of type RN_T per item, value i covering elements (lid + i·L)·RN_W onwards: with
// RN_V4 (D % 4 == 0) runs of four moved as one aligned access each (16 bytes in f32, 8 in f16, so a warp's
// load is whole lines even in f16), RN_K values rounded up to whole runs; otherwise RN_K single elements. With
// RN_V8 (f16 rows, D % 8 == 0) runs of eight halves move as one 16-byte access and stay in registers as their
// raw halves (half the registers of floats, so an item may hold twice as many values), converted (RN_F) where
// they are used. RN_LDX reads x, RN_LD/RN_ST γ, β and y.
#if RN_V8
#if !IN_HALF
#error "RN_V8 holds f16 rows only"
#endif
#define RN_W 8
#define RN_N ((RN_K + 7) / 8)
#define RN_T uint4
#define RN_VF float8
#define RN_ZERO ((uint4)(0u))
#define RN_F(r) vload_half8(0, (const __private half*)&(r))
#define RN_LDX(p, i) (*(__global const uint4*)((__global const half*)(p) + (i)))
#define RN_LD(h, p, i) NCL_CAT(RN_GV8_, h)(p, i)
#define RN_GV8_0(p, i) vload8(0, (p) + (i))
#define RN_GV8_1(p, i) vloada_half8((i) >> 3, (__global const half*)(p))
#define RN_ST(h, v, p, i) NCL_CAT(RN_SV8_, h)(v, p, i)
#define RN_SV8_0(v, p, i) vstore8((v), 0, (p) + (i))
#define RN_SV8_1(v, p, i) vstorea_half8_rte((v), (i) >> 3, (__global half*)(p))
#define RN_HSUM4(d) (((d).s0 + (d).s1) + ((d).s2 + (d).s3))
#define RN_HSUM(d) (RN_HSUM4((d).lo) + RN_HSUM4((d).hi))
#elif RN_V4
#define RN_W 4
#define RN_N ((RN_K + 3) / 4)
#define RN_T float4
#define RN_VF float4
#define RN_ZERO ((float4)(0.0f))
#define RN_F(r) (r)
#define RN_LD(h, p, i) LDXA4(h, p, i)
#define RN_LDX(p, i) RN_LD(IN_HALF, p, i)
#define RN_ST(h, v, p, i) STXA4(h, v, p, i)
#define RN_HSUM(d) (((d).s0 + (d).s1) + ((d).s2 + (d).s3))
#else
#define RN_W 1
#define RN_N RN_K
#define RN_T float
#define RN_VF float
#define RN_ZERO 0.0f
#define RN_F(r) (r)
#define RN_LD(h, p, i) LDX(h, p, i)
#define RN_LDX(p, i) RN_LD(IN_HALF, p, i)
#define RN_ST(h, v, p, i) STX(h, v, p, i)
#define RN_HSUM(d) (d)
#endif

static inline float rn_shift(__global const float* x, const size_t b) {
#if CENTER
    const float k = LDX(IN_HALF, x, b);
    return isfinite(k) ? k : 0.0f;
#else
    return 0.0f;
#endif
}

// The row's mean and rstd from the shifted sums s1 = Σd and s2 = Σd² over D elements.
static inline void rn_finish(const float k, const float s1, const float s2, const int D, const float eps,
                             float* m, float* r) {
    const float inv = 1.0f / (float)D;
#if CENTER
    const float md = s1 * inv;
    const float var = fmax(s2 * inv - md * md, 0.0f);
    *m = k + md;
    *r = rsqrt(var + eps);
#else
    *m = 0.0f;
    *r = rsqrt(s2 * inv + eps);
#endif
}

static inline float rn_apply(const float v, const float m, const float r, const int has_gamma,
                             const int has_beta, __global const float* gamma, __global const float* beta,
                             const int j) {
#if CENTER
    float o = (v - m) * r;
#else
    float o = v * r;
#endif
    if (has_gamma) o *= LDX(A_HALF, gamma, j);
    if (has_beta) o += LDX(B_HALF, beta, j);
    return o;
}

// Tree sum of `v` over the work-group through the local array `sc` (L a power of two); every item gets it.
#define RN_GROUP_SUM(v)                                        \
    sc[lid] = (v);                                             \
    barrier(CLK_LOCAL_MEM_FENCE);                              \
    for (int s_ = L >> 1; s_ > 0; s_ >>= 1) {                  \
        if (lid < s_) sc[lid] += sc[lid + s_];                 \
        barrier(CLK_LOCAL_MEM_FENCE);                          \
    }                                                          \
    v = sc[0];                                                 \
    barrier(CLK_LOCAL_MEM_FENCE);

__kernel void rn_row_wg(const int D, const float eps, const int has_gamma, const int has_beta,
                        __global const float* x, __global const float* gamma, __global const float* beta,
                        __global float* y, __global float* mean, __global float* rstd, __local float* sc) {
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    const int o = get_group_id(0);
    const size_t b = (size_t)o * D;
    const float k = rn_shift(x, b);
    float s1 = 0.0f, s2 = 0.0f;
    for (int j = lid; j < D; j += L) {
        const float d = LDX(IN_HALF, x, b + j) - k;
        s1 += d;
        s2 += d * d;
    }
#if CENTER
    RN_GROUP_SUM(s1)
#endif
    RN_GROUP_SUM(s2)
    float m, r;
    rn_finish(k, s1, s2, D, eps, &m, &r);
    for (int j = lid; j < D; j += L) {
        const float v = LDX(IN_HALF, x, b + j);
        STX(OUT_HALF, rn_apply(v, m, r, has_gamma, has_beta, gamma, beta, j), y, b + j);
    }
    if (lid == 0) {
        mean[o] = m;
        rstd[o] = r;
    }
}

__kernel void rn_row_reg(const int D, const float eps, const int has_gamma, const int has_beta,
                         __global const float* x, __global const float* gamma, __global const float* beta,
                         __global float* y, __global float* mean, __global float* rstd, __local float* sc) {
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    const int o = get_group_id(0);
    const size_t b = (size_t)o * D;
    GROUP_FOLD_VARS
    // The mean is the row's first element plus the mean of the shifted values: the sum never grows with the
    // offset of the row.
    const float k = rn_shift(x, b);
    const float inv = 1.0f / (float)D;
    RN_T v[RN_N];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < RN_N; ++i) {
        const int j = (lid + i * L) * RN_W;
        v[i] = j < D ? RN_LDX(x, b + j) : RN_ZERO;
#if CENTER
        if (j < D) {
            const RN_VF d = RN_F(v[i]) - k;
            s += RN_HSUM(d);
        }
#endif
    }
#if CENTER
    GROUP_FOLD(s, NCL_ADD)
    const float m = k + s * inv;
#else
    const float m = 0.0f;
#endif
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < RN_N; ++i) {
        if ((lid + i * L) * RN_W < D) {
            const RN_VF d = RN_F(v[i]) - m;
            const RN_VF d2 = d * d;
            q += RN_HSUM(d2);
        }
    }
    GROUP_FOLD(q, NCL_ADD)
    const float r = rsqrt(q * inv + eps);
#pragma unroll
    for (int i = 0; i < RN_N; ++i) {
        const int j = (lid + i * L) * RN_W;
        if (j < D) {
#if CENTER
            RN_VF t = (RN_F(v[i]) - m) * r;
#else
            RN_VF t = RN_F(v[i]) * r;
#endif
            if (has_gamma) t *= RN_LD(A_HALF, gamma, j);
            if (has_beta) t += RN_LD(B_HALF, beta, j);
            RN_ST(OUT_HALF, t, y, b + j);
        }
    }
    if (lid == 0) {
        mean[o] = m;
        rstd[o] = r;
    }
}

#if VEC8
#define RN_LD8(h, p, i) NCL_CAT(RN_LD8_, h)(p, i)
#define RN_LD8_0(p, i) vload8(0, (p) + (i))
#define RN_LD8_1(p, i) vload_half8(0, (__global const half*)(p) + (i))
#define RN_ST8(h, v, p, i) NCL_CAT(RN_ST8_, h)(v, p, i)
#define RN_ST8_0(v, p, i) vstore8((v), 0, (p) + (i))
#define RN_ST8_1(v, p, i) vstore_half8_rte((v), 0, (__global half*)(p) + (i))
#endif

__kernel void rn_row_item(const int rows, const int D, const float eps, const int has_gamma, const int has_beta,
                          __global const float* x, __global const float* gamma, __global const float* beta,
                          __global float* y, __global float* mean, __global float* rstd) {
    const int o = get_global_id(0);
    if (o >= rows) return;
    const size_t b = (size_t)o * D;
    const float k = rn_shift(x, b);
    float s1 = 0.0f, s2 = 0.0f;
#if VEC8
    float8 a1 = (float8)(0.0f), a2 = (float8)(0.0f);
    for (int j = 0; j < D; j += 8) {
        const float8 d = RN_LD8(IN_HALF, x, b + j) - k;
        a1 += d;
        a2 += d * d;
    }
    const float4 h1 = a1.lo + a1.hi, h2 = a2.lo + a2.hi;
    s1 = (h1.s0 + h1.s1) + (h1.s2 + h1.s3);
    s2 = (h2.s0 + h2.s1) + (h2.s2 + h2.s3);
#else
    for (int j = 0; j < D; ++j) {
        const float d = LDX(IN_HALF, x, b + j) - k;
        s1 += d;
        s2 += d * d;
    }
#endif
    float m, r;
    rn_finish(k, s1, s2, D, eps, &m, &r);
#if VEC8
    for (int j = 0; j < D; j += 8) {
#if CENTER
        float8 t = (RN_LD8(IN_HALF, x, b + j) - m) * r;
#else
        float8 t = RN_LD8(IN_HALF, x, b + j) * r;
#endif
        if (has_gamma) t *= RN_LD8(A_HALF, gamma, j);
        if (has_beta) t += RN_LD8(B_HALF, beta, j);
        RN_ST8(OUT_HALF, t, y, b + j);
    }
#else
    for (int j = 0; j < D; ++j) {
        const float v = LDX(IN_HALF, x, b + j);
        STX(OUT_HALF, rn_apply(v, m, r, has_gamma, has_beta, gamma, beta, j), y, b + j);
    }
#endif
    mean[o] = m;
    rstd[o] = r;
}

// The backward's input gradient per row, from x, the output gradient g, γ, the saved rstd r and, for layer_norm
// (CENTER 1), the saved mean μ. With u = x − μ (rms_norm: u = x), ĝ = g·γ and c = r²·Σĝ·u / D:
//   layer_norm: dx = (ĝ − Σĝ/D − u·c)·r, which is r·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) with x̂ = u·r;
//   rms_norm:   dx = (ĝ − u·c)·r.
// IN_HALF for x, B_HALF for g, A_HALF for γ, OUT_HALF for dx; μ and r are f32 (mean is not read for rms_norm:
// any buffer stands in). dγ = Σ over rows of g·x̂ (and layer_norm's dβ = Σ over rows of g) are column sums, left
// to the reductions. Kernels: rnb_row_wg (a work-group per row, GPUs) and rnb_row_item (a work-item per row,
// float8 loads with VEC8, CPU OpenCL); both read x and g twice.

#if CENTER
#define RNB_U(v) ((v) - m)
#else
#define RNB_U(v) (v)
#endif

__kernel void rnb_row_wg(const int D, const int has_gamma, __global const float* x, __global const float* g,
                         __global const float* gamma, __global const float* mean, __global const float* rstd,
                         __global float* dx, __local float* sc) {
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    const int o = get_group_id(0);
    const size_t b = (size_t)o * D;
    const float r = rstd[o];
#if CENTER
    const float m = mean[o];
    float mg = 0.0f;
#endif
    float c = 0.0f;
    for (int j = lid; j < D; j += L) {
        float gh = LDX(B_HALF, g, b + j);
        if (has_gamma) gh *= LDX(A_HALF, gamma, j);
#if CENTER
        mg += gh;
#endif
        c += gh * RNB_U(LDX(IN_HALF, x, b + j));
    }
#if CENTER
    RN_GROUP_SUM(mg)
    mg /= (float)D;
#endif
    RN_GROUP_SUM(c)
    c *= r * r / (float)D;
    for (int j = lid; j < D; j += L) {
        float gh = LDX(B_HALF, g, b + j);
        if (has_gamma) gh *= LDX(A_HALF, gamma, j);
#if CENTER
        gh -= mg;
#endif
        STX(OUT_HALF, (gh - RNB_U(LDX(IN_HALF, x, b + j)) * c) * r, dx, b + j);
    }
}

__kernel void rnb_row_item(const int rows, const int D, const int has_gamma, __global const float* x,
                           __global const float* g, __global const float* gamma, __global const float* mean,
                           __global const float* rstd, __global float* dx) {
    const int o = get_global_id(0);
    if (o >= rows) return;
    const size_t b = (size_t)o * D;
    const float r = rstd[o];
#if CENTER
    const float m = mean[o];
    float mg = 0.0f;
#endif
    float c = 0.0f;
#if VEC8
    float8 a = (float8)(0.0f);
#if CENTER
    float8 ag = (float8)(0.0f);
#endif
    for (int j = 0; j < D; j += 8) {
        float8 gh = RN_LD8(B_HALF, g, b + j);
        if (has_gamma) gh *= RN_LD8(A_HALF, gamma, j);
#if CENTER
        ag += gh;
#endif
        a += gh * RNB_U(RN_LD8(IN_HALF, x, b + j));
    }
    const float4 h = a.lo + a.hi;
    c = (h.s0 + h.s1) + (h.s2 + h.s3);
#if CENTER
    const float4 hg = ag.lo + ag.hi;
    mg = (hg.s0 + hg.s1) + (hg.s2 + hg.s3);
#endif
#else
    for (int j = 0; j < D; ++j) {
        float gh = LDX(B_HALF, g, b + j);
        if (has_gamma) gh *= LDX(A_HALF, gamma, j);
#if CENTER
        mg += gh;
#endif
        c += gh * RNB_U(LDX(IN_HALF, x, b + j));
    }
#endif
#if CENTER
    mg /= (float)D;
#endif
    c *= r * r / (float)D;
#if VEC8
    for (int j = 0; j < D; j += 8) {
        float8 gh = RN_LD8(B_HALF, g, b + j);
        if (has_gamma) gh *= RN_LD8(A_HALF, gamma, j);
#if CENTER
        gh -= mg;
#endif
        RN_ST8(OUT_HALF, (gh - RNB_U(RN_LD8(IN_HALF, x, b + j)) * c) * r, dx, b + j);
    }
#else
    for (int j = 0; j < D; ++j) {
        float gh = LDX(B_HALF, g, b + j);
        if (has_gamma) gh *= LDX(A_HALF, gamma, j);
#if CENTER
        gh -= mg;
#endif
        STX(OUT_HALF, (gh - RNB_U(LDX(IN_HALF, x, b + j)) * c) * r, dx, b + j);
    }
#endif
}
