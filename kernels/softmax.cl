// softmax / log_softmax over R of the view [O, R, I], forward and backward, and fused cross-entropy.
// LOG = 1 builds log_softmax. Kernels:
//   sm_row_wg / smb_row_wg:   I == 1, one work-group per row, local-memory trees (GPUs);
//   sm_row_serial / smb_row_serial: I == 1, one work-item per row, no barriers (CPU OpenCL);
//   sm_row_reg:               I == 1, R % SM_W == 0: one work-group per row holding the row in registers (SM_K
//                             loads of SM_W = 4 elements, or 8 halves of an f16 row, per work-item), so the row
//                             is read once and written once (GPUs);
//   sm_col / smb_col:         I > 1, one work-item per (o, i), coalesced across i.
// Backward: softmax gx = y·(g − Σg·y); log_softmax gx = g − e^y·Σg, from the forward output y.
// f16 storage (LDX/STX of kernels/prelude.cl): forward IN_HALF for x, OUT_HALF for y; backward IN_HALF for y,
// B_HALF for g, OUT_HALF for gx. The maths is f32; an f16 output is rounded once.

#ifndef LOG
#define LOG 0
#endif

static inline float nmax(float a, float b) { return (isnan(a) || isnan(b)) ? a + b : fmax(a, b); }

__kernel void sm_row_wg(const int R, __global const float* x, __global float* y, __local float* sc) {
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    const int o = get_group_id(0);
    const int b = o * R;
    float m = -INFINITY;
    for (int r = lid; r < R; r += L) m = nmax(m, LDX(IN_HALF, x, b + r));
    sc[lid] = m;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = L >> 1; s > 0; s >>= 1) {
        if (lid < s) sc[lid] = nmax(sc[lid], sc[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    m = sc[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    float z = 0.0f;
    for (int r = lid; r < R; r += L) z += exp(LDX(IN_HALF, x, b + r) - m);
    sc[lid] = z;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = L >> 1; s > 0; s >>= 1) {
        if (lid < s) sc[lid] += sc[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    z = sc[0];
#if LOG
    const float lz = log(z);
    for (int r = lid; r < R; r += L) STX(OUT_HALF, LDX(IN_HALF, x, b + r) - m - lz, y, b + r);
#else
    const float iz = 1.0f / z;
    for (int r = lid; r < R; r += L) STX(OUT_HALF, exp(LDX(IN_HALF, x, b + r) - m) * iz, y, b + r);
#endif
}

#ifndef SM_K
#define SM_K 1
#endif

// An f16 output is rounded to 11 significant bits, far coarser than the native exponential's error (a few f32
// ulps), which GPUs compute several times faster: the register kernel uses it then.
#if OUT_HALF
#define SM_EXP(v) native_exp(v)
#else
#define SM_EXP(v) exp(v)
#endif

#define MAX4(v) nmax(nmax((v).s0, (v).s1), nmax((v).s2, (v).s3))
#define SUM4(v) (((v).s0 + (v).s1) + ((v).s2 + (v).s3))

// SM_W = 8 (f16 rows only, R % 8 == 0): each load brings eight halves (16 bytes, as much as a float4 of an f32
// row), so half the work-items keep as many bytes in flight per row as the f32 kernel.
#ifndef SM_W
#define SM_W 4
#endif
#if SM_W == 8 && !IN_HALF
#error "SM_W = 8 reads f16 rows only"
#endif

__kernel void sm_row_reg(const int R, __global const float* x, __global float* y, __local float* sc) {
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    const int o = get_group_id(0);
    GROUP_FOLD_VARS
    const int RW = R / SM_W;
    // R % SM_W == 0, so every row starts 4·SM_W bytes aligned (an f16 row 2·SM_W bytes, read as SM_W halves a
    // time). An f16 row stays in registers as its raw halves (half the registers of floats), converted where
    // it is used; the exponentials are then computed again for the output.
#if SM_W == 8
    __global const uint4* p = (__global const uint4*)((__global const half*)x + (size_t)o * R);
#define SM_ELEM uint4
#define SM_PAD ((uint4)(0xFC00FC00u))
#define SM_VF float8
#define SM_F(r) vload_half8(0, (const __private half*)&(r))
#define SM_MAXV(v) nmax(MAX4((v).lo), MAX4((v).hi))
#define SM_SUMV(v) (SUM4((v).lo) + SUM4((v).hi))
#elif IN_HALF
    __global const uint2* p = (__global const uint2*)((__global const half*)x + (size_t)o * R);
#define SM_ELEM uint2
#define SM_PAD ((uint2)(0xFC00FC00u))
#define SM_VF float4
#define SM_F(r) vload_half4(0, (const __private half*)&(r))
#define SM_MAXV(v) MAX4(v)
#define SM_SUMV(v) SUM4(v)
#else
    __global const float4* p = (__global const float4*)(x + (size_t)o * R);
#define SM_ELEM float4
#define SM_PAD ((float4)(-INFINITY))
#define SM_VF float4
#define SM_F(r) (r)
#define SM_MAXV(v) MAX4(v)
#define SM_SUMV(v) SUM4(v)
#endif
    // An f16 row's runs are stored from y itself, indexed by run (o·RW + j): NVIDIA's compiler makes that one
    // vector store per run, but eight (or four) 2-byte stores when the row's start is added to the pointer first.
#if OUT_HALF && SM_W == 8
#define QV(j, v) vstorea_half8_rte((v), (size_t)o * RW + (j), (__global half*)y)
#elif OUT_HALF
#define QV(j, v) vstorea_half4_rte((v), (size_t)o * RW + (j), (__global half*)y)
#elif SM_W == 8
    __global float* q = y + (size_t)o * R;
#define QV(j, v) vstore8((v), (j), q)
#else
    __global float4* q = (__global float4*)(y + (size_t)o * R);
#define QV(j, v) (q[j] = (v))
#endif
    SM_ELEM v[SM_K];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < SM_K; ++k) {
        const int j = lid + k * L;
        v[k] = j < RW ? p[j] : SM_PAD;
        m = nmax(m, SM_MAXV(SM_F(v[k])));
    }
    GROUP_FOLD(m, nmax)
    float z = 0.0f;
#pragma unroll
    for (int k = 0; k < SM_K; ++k) {
        if (lid + k * L < RW) {
            const SM_VF e = SM_EXP(SM_F(v[k]) - m);
            z += SM_SUMV(e);
#if !LOG && !IN_HALF
            v[k] = e;
#endif
        }
    }
    GROUP_FOLD(z, NCL_ADD)
#if LOG
    const float lz = m + log(z);
#pragma unroll
    for (int k = 0; k < SM_K; ++k) {
        const int j = lid + k * L;
        if (j < RW) QV(j, SM_F(v[k]) - lz);
    }
#else
    const float iz = 1.0f / z;
#pragma unroll
    for (int k = 0; k < SM_K; ++k) {
        const int j = lid + k * L;
#if IN_HALF
        if (j < RW) QV(j, SM_EXP(SM_F(v[k]) - m) * iz);
#else
        if (j < RW) QV(j, v[k] * iz);
#endif
    }
#endif
}

__kernel void sm_row_serial(const int O, const int R, __global const float* x, __global float* y) {
    const int o = get_global_id(0);
    if (o >= O) return;
    const int b = o * R;
    float m = -INFINITY;
    for (int r = 0; r < R; ++r) m = nmax(m, LDX(IN_HALF, x, b + r));
    float z = 0.0f;
#if LOG
    for (int r = 0; r < R; ++r) z += exp(LDX(IN_HALF, x, b + r) - m);
    const float lz = log(z);
    for (int r = 0; r < R; ++r) STX(OUT_HALF, LDX(IN_HALF, x, b + r) - m - lz, y, b + r);
#elif OUT_HALF
    // An f16 output is written once, rounded once: the exponentials are computed again rather than stored.
    for (int r = 0; r < R; ++r) z += exp(LDX(IN_HALF, x, b + r) - m);
    const float iz = 1.0f / z;
    for (int r = 0; r < R; ++r) STX(1, exp(LDX(IN_HALF, x, b + r) - m) * iz, y, b + r);
#else
    __global float* q = y + b;
    // One exp per element: the numerators are stored, then scaled.
    for (int r = 0; r < R; ++r) {
        const float e = exp(LDX(IN_HALF, x, b + r) - m);
        q[r] = e;
        z += e;
    }
    const float iz = 1.0f / z;
    for (int r = 0; r < R; ++r) q[r] *= iz;
#endif
}

__kernel void sm_col(const int O, const int R, const int I, __global const float* x, __global float* y) {
    const int t = get_global_id(0);
    if (t >= O * I) return;
    const int o = t / I;
    const int i = t - o * I;
    const int b = o * R * I + i;
    float m = -INFINITY;
    for (int r = 0; r < R; ++r) m = nmax(m, LDX(IN_HALF, x, b + r * I));
    float z = 0.0f;
#if LOG
    for (int r = 0; r < R; ++r) z += exp(LDX(IN_HALF, x, b + r * I) - m);
    const float lz = log(z);
    for (int r = 0; r < R; ++r) STX(OUT_HALF, LDX(IN_HALF, x, b + r * I) - m - lz, y, b + r * I);
#elif OUT_HALF
    for (int r = 0; r < R; ++r) z += exp(LDX(IN_HALF, x, b + r * I) - m);
    const float iz = 1.0f / z;
    for (int r = 0; r < R; ++r) STX(1, exp(LDX(IN_HALF, x, b + r * I) - m) * iz, y, b + r * I);
#else
    __global float* q = y + b;
    for (int r = 0; r < R; ++r) {
        const float e = exp(LDX(IN_HALF, x, b + r * I) - m);
        q[r * I] = e;
        z += e;
    }
    const float iz = 1.0f / z;
    for (int r = 0; r < R; ++r) q[r * I] *= iz;
#endif
}

#if LOG
#define DOT_TERM(yv, gv) (gv)
#define GRAD(yv, gv, d) ((gv) - exp(yv) * (d))
#else
#define DOT_TERM(yv, gv) ((gv) * (yv))
#define GRAD(yv, gv, d) ((yv) * ((gv) - (d)))
#endif

__kernel void smb_row_wg(const int R, __global const float* y, __global const float* g, __global float* gx,
                         __local float* sc) {
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    const int o = get_group_id(0);
    const int b = o * R;
    float d = 0.0f;
    for (int r = lid; r < R; r += L) d += DOT_TERM(LDX(IN_HALF, y, b + r), LDX(B_HALF, g, b + r));
    sc[lid] = d;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = L >> 1; s > 0; s >>= 1) {
        if (lid < s) sc[lid] += sc[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    d = sc[0];
    for (int r = lid; r < R; r += L) STX(OUT_HALF, GRAD(LDX(IN_HALF, y, b + r), LDX(B_HALF, g, b + r), d), gx, b + r);
}

__kernel void smb_row_serial(const int O, const int R, __global const float* y, __global const float* g,
                             __global float* gx) {
    const int o = get_global_id(0);
    if (o >= O) return;
    const int b = o * R;
    float d = 0.0f;
    for (int r = 0; r < R; ++r) d += DOT_TERM(LDX(IN_HALF, y, b + r), LDX(B_HALF, g, b + r));
    for (int r = 0; r < R; ++r) STX(OUT_HALF, GRAD(LDX(IN_HALF, y, b + r), LDX(B_HALF, g, b + r), d), gx, b + r);
}

__kernel void smb_col(const int O, const int R, const int I, __global const float* y, __global const float* g,
                      __global float* gx) {
    const int t = get_global_id(0);
    if (t >= O * I) return;
    const int o = t / I;
    const int i = t - o * I;
    const int base = o * R * I + i;
    float d = 0.0f;
    for (int r = 0; r < R; ++r) d += DOT_TERM(LDX(IN_HALF, y, base + r * I), LDX(B_HALF, g, base + r * I));
    for (int r = 0; r < R; ++r) {
        const int k = base + r * I;
        STX(OUT_HALF, GRAD(LDX(IN_HALF, y, k), LDX(B_HALF, g, k), d), gx, k);
    }
}

// Cross-entropy rows: loss_n = log Σ e^x − x[label] for labels in [0, C); 0 for ignored rows.
// valid[n] = 1 (counted), 0 (ignored) or -1 (label out of range).
__kernel void ce_rows(const int N, const int C, const int ignore, __global const float* x, __global const int* labels,
                      __global float* loss, __global int* valid) {
    const int n = get_global_id(0);
    if (n >= N) return;
    const int lab = labels[n];
    if (lab == ignore) {
        loss[n] = 0.0f;
        valid[n] = 0;
        return;
    }
    if (lab < 0 || lab >= C) {
        loss[n] = 0.0f;
        valid[n] = -1;
        return;
    }
    __global const float* p = x + n * C;
    float m = -INFINITY;
    for (int c = 0; c < C; ++c) m = nmax(m, p[c]);
    float z = 0.0f;
    for (int c = 0; c < C; ++c) z += exp(p[c] - m);
    loss[n] = log(z) + m - p[lab];
    valid[n] = 1;
}

// stats = [mean loss, count, first bad row or -1]; one work-group of L items.
__kernel void ce_finish(const int N, __global const float* loss, __global const int* valid, __global float* stats,
                        __local float* sl, __local int* sc, __local int* sb) {
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    float s = 0.0f;
    int c = 0;
    int bad = N;
    for (int n = lid; n < N; n += L) {
        s += loss[n];
        const int v = valid[n];
        if (v > 0) c += 1;
        if (v < 0 && n < bad) bad = n;
    }
    sl[lid] = s;
    sc[lid] = c;
    sb[lid] = bad;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = L >> 1; k > 0; k >>= 1) {
        if (lid < k) {
            sl[lid] += sl[lid + k];
            sc[lid] += sc[lid + k];
            sb[lid] = min(sb[lid], sb[lid + k]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        stats[0] = sl[0] / (float)sc[0];
        stats[1] = (float)sc[0];
        stats[2] = sb[0] == N ? -1.0f : (float)sb[0];
    }
}

// gx = (softmax(x) − onehot(label)) · gout / count for counted rows, 0 for ignored rows; one item per row.
__kernel void ce_bwd(const int N, const int C, const int ignore, __global const float* x, __global const int* labels,
                     __global const float* stats, __global const float* gout, __global float* gx) {
    const int n = get_global_id(0);
    if (n >= N) return;
    const int lab = labels[n];
    __global const float* p = x + n * C;
    __global float* q = gx + n * C;
    if (lab == ignore || lab < 0 || lab >= C) {
        for (int c = 0; c < C; ++c) q[c] = 0.0f;
        return;
    }
    const float k = gout[0] / stats[1];
    float m = -INFINITY;
    for (int c = 0; c < C; ++c) m = nmax(m, p[c]);
    float z = 0.0f;
    for (int c = 0; c < C; ++c) z += exp(p[c] - m);
    const float iz = 1.0f / z;
    for (int c = 0; c < C; ++c) q[c] = (exp(p[c] - m) * iz - (c == lab ? 1.0f : 0.0f)) * k;
}
