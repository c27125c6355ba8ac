// Training batch normalisation of N×C×H×W per channel (P = H·W elements per plane, planes ordered (n, c)).
// Statistics are shifted sums: with K the channel's first element (0 when it is not finite), each chunk sums
// d = x − K and d², which keeps the variance accurate when the mean is large against the spread. Kernels:
//   bn_partial_wg:   work-group per (chunk g, channel c), strided loads (float4 with VEC4) and a local tree (GPUs);
//   bn_partial_item: one work-item per (chunk g, channel c), float8 loads along each plane, no barriers (CPU);
//   bn_finish:       one work-item per channel: folds the G partials into mean, rstd, the scale γ·rstd, the
//                    shift β, and the updated running statistics;
//   bn_apply_flat:   y = (x − mean)·scale + shift, one float4 (VEC4) or float per work-item over all elements;
//   bn_apply_plane:  the same, one work-item per plane with float8 loads (CPU);
//   bn_apply_back:   on the statistics pass's own (chunk, channel) grid, each group walking its chunk from the
//                    end (what that pass read last, still cached, is read first) and folding its channel's
//                    partials itself: no bn_finish launch, the chunk-0 group writes the statistics;
//   bn_pipe:         everything in one launch (GPUs): groups sum a chunk, then normalise the previous
//                    channel's chunk once that channel is complete (see the kernel).
// A chunk covers `rc` consecutive elements of the channel's N·P (in float4 units with VEC4). With UNR 4 the
// strided loops issue four independent loads per iteration (more bytes in flight); the order of the
// additions is the same as with UNR 1.

#ifndef VEC4
#define VEC4 0
#endif
#ifndef UNR
#define UNR 1
#endif
// The unit of the strided loops: a float4 of a plane (VEC4) or a float.
#if VEC4
#define BN_T float4
#define BN_PU(P) ((P) >> 2)
#define BN_HSUM(v) (((v).s0 + (v).s1) + ((v).s2 + (v).s3))
#else
#define BN_T float
#define BN_PU(P) (P)
#define BN_HSUM(v) (v)
#endif

static inline float bn_shift(__global const float* x, const int c, const int P) {
    const float k = x[c * P];
    return isfinite(k) ? k : 0.0f;
}

// The shifted sum and sum of squares of chunk g of channel c, for item lid of L (one partial per item).
static inline void bn_sums(const int N, const int C, const int P, const int rc, const int g, const int c,
                           const int lid, const int L, __global const float* x, float* sum, float* sq) {
    const float k = bn_shift(x, c, P);
    const int PU = BN_PU(P);
    const int total = N * PU;
    __global const BN_T* xu = (__global const BN_T*)x;
    BN_T su = (BN_T)(0.0f), qu = (BN_T)(0.0f);
    const int start = min(total, g * rc);
    const int end = min(total, start + rc);
    int j = start + lid;
#if UNR == 4
    for (; j + 3 * L < end; j += 4 * L) {
        BN_T v[4];
        for (int u = 0; u < 4; ++u) {
            const int jj = j + u * L;
            const int n = jj / PU;
            v[u] = xu[(n * C + c) * PU + (jj - n * PU)];
        }
        for (int u = 0; u < 4; ++u) {
            const BN_T d = v[u] - k;
            su += d;
            qu = fma(d, d, qu);
        }
    }
#endif
    for (; j < end; j += L) {
        const int n = j / PU;
        const BN_T d = xu[(n * C + c) * PU + (j - n * PU)] - k;
        su += d;
        qu = fma(d, d, qu);
    }
    *sum = BN_HSUM(su);
    *sq = BN_HSUM(qu);
}

// Sums ls[0..L) and lq[0..L) into ls[0], lq[0] (L a power of two); every item takes part.
static inline void bn_tree(const int lid, const int L, __local float* ls, __local float* lq) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L >> 1; h > 0; h >>= 1) {
        if (lid < h) {
            ls[lid] += ls[lid + h];
            lq[lid] += lq[lid + h];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

// The work-group's partial of chunk g of channel c, stored by item 0 at part[(c·G + g)·2 + {0, 1}].
static inline void bn_chunk_partial(const int N, const int C, const int P, const int rc, const int G,
                                    const int g, const int c, const int lid, const int L,
                                    __global const float* x, __global float* part, __local float* ls,
                                    __local float* lq) {
    float s, q;
    bn_sums(N, C, P, rc, g, c, lid, L, x, &s, &q);
    ls[lid] = s;
    lq[lid] = q;
    bn_tree(lid, L, ls, lq);
    if (lid == 0) {
        part[(c * G + g) * 2] = ls[0];
        part[(c * G + g) * 2 + 1] = lq[0];
    }
}

__kernel void bn_partial_wg(const int N, const int C, const int P, const int rc, const int G,
                            __global const float* x, __global float* part, __local float* ls,
                            __local float* lq) {
    bn_chunk_partial(N, C, P, rc, G, get_group_id(0), get_global_id(1), get_local_id(0), get_local_size(0),
                     x, part, ls, lq);
}

__kernel void bn_partial_item(const int N, const int C, const int P, const int rc, const int G,
                              __global const float* x, __global float* part) {
    const int g = get_global_id(0);
    const int c = get_global_id(1);
    if (g >= G || c >= C) return;
    const float k = bn_shift(x, c, P);
    const int total = N * P;
    const int start = min(total, g * rc);
    const int end = min(total, start + rc);
    float8 s8 = (float8)(0.0f), q8 = (float8)(0.0f);
    float s = 0.0f, q = 0.0f;
    int j = start;
    while (j < end) {
        // One plane segment [j, stop) at a time: contiguous in memory.
        const int n = j / P;
        const int stop = min(end, (n + 1) * P);
        __global const float* p = x + (n * C + c) * P - n * P;
        for (; j + 8 <= stop; j += 8) {
            const float8 d = vload8(0, p + j) - k;
            s8 += d;
            q8 = fma(d, d, q8);
        }
        for (; j < stop; ++j) {
            const float d = p[j] - k;
            s += d;
            q = fma(d, d, q);
        }
    }
    const float4 sa = s8.lo + s8.hi, qa = q8.lo + q8.hi;
    part[(c * G + g) * 2] = s + (sa.s0 + sa.s1) + (sa.s2 + sa.s3);
    part[(c * G + g) * 2 + 1] = q + (qa.s0 + qa.s1) + (qa.s2 + qa.s3);
}

// Channel c's statistics from its G partials, in a fixed order (every caller gets the same bits).
// The partials are read through a volatile pointer: in bn_pipe they were written by other work-groups of the
// same launch.
static inline void bn_fold(const int c, const int N, const int P, const int G, const float eps,
                           __global const float* x, volatile __global const float* part, float* mean, float* var,
                           float* rstd) {
    float s = 0.0f, q = 0.0f;
    for (int g = 0; g < G; ++g) {
        s += part[(c * G + g) * 2];
        q += part[(c * G + g) * 2 + 1];
    }
    const float cnt = (float)N * (float)P;
    const float d = s / cnt;
    *mean = bn_shift(x, c, P) + d;
    float v = q / cnt - d * d;
    // Rounding can make a tiny variance negative; a NaN stays NaN.
    *var = v < 0.0f ? 0.0f : v;
    *rstd = 1.0f / sqrt(*var + eps);
}

// mean[c], rstd[c], and stat[c] = γ·rstd, stat[C + c] = β (0 without β) for the apply.
__kernel void bn_finish(const int N, const int C, const int P, const int G, const float eps, const float momentum,
                        const int has_gamma, const int has_beta, __global const float* x,
                        __global const float* part, __global const float* gamma, __global const float* beta,
                        __global const float* rm, __global const float* rv, __global float* mean_out,
                        __global float* rstd_out, __global float* stat,
                        __global float* rm_out, __global float* rv_out) {
    const int c = get_global_id(0);
    if (c >= C) return;
    float mean, var, rstd;
    bn_fold(c, N, P, G, eps, x, part, &mean, &var, &rstd);
    mean_out[c] = mean;
    rstd_out[c] = rstd;
    stat[c] = has_gamma ? gamma[c] * rstd : rstd;
    stat[C + c] = has_beta ? beta[c] : 0.0f;
    rm_out[c] = (1.0f - momentum) * rm[c] + momentum * mean;
    rv_out[c] = (1.0f - momentum) * rv[c] + momentum * var;
}

__kernel void bn_apply_flat(const int total, const int C, const int P, __global const float* x,
                            __global const float* mean, __global const float* stat, __global float* y) {
    const int i = get_global_id(0);
    if (i >= total) return;
#if VEC4
    const int c = (i / (P >> 2)) % C;
    const float4 v = ((__global const float4*)x)[i];
    ((__global float4*)y)[i] = (v - mean[c]) * stat[c] + stat[C + c];
#else
    const int c = (i / P) % C;
    y[i] = (x[i] - mean[c]) * stat[c] + stat[C + c];
#endif
}

__kernel void bn_apply_plane(const int planes, const int C, const int P, __global const float* x,
                             __global const float* mean, __global const float* stat, __global float* y) {
    const int t = get_global_id(0);
    if (t >= planes) return;
    const int c = t % C;
    const float m = mean[c], a = stat[c], b = stat[C + c];
    __global const float* p = x + t * P;
    __global float* o = y + t * P;
    int j = 0;
    for (; j + 8 <= P; j += 8) vstore8((vload8(0, p + j) - m) * a + b, 0, o + j);
    for (; j < P; ++j) o[j] = (p[j] - m) * a + b;
}

// The normalising pass's per-channel constants from the partials; `write` stores the channel's statistics.
static inline void bn_prologue(const int c, const int N, const int C, const int P, const int G, const float eps,
                               const float momentum, const int has_gamma, const int has_beta, const bool write,
                               __global const float* x, volatile __global const float* part,
                               __global const float* gamma, __global const float* beta,
                               __global const float* rm, __global const float* rv, __global float* mean_out,
                               __global float* rstd_out, __global float* stat, __global float* rm_out,
                               __global float* rv_out, float* mean, float* a, float* sh) {
    float var, rstd;
    bn_fold(c, N, P, G, eps, x, part, mean, &var, &rstd);
    *a = has_gamma ? gamma[c] * rstd : rstd;
    *sh = has_beta ? beta[c] : 0.0f;
    if (write) {
        mean_out[c] = *mean;
        rstd_out[c] = rstd;
        stat[c] = *a;
        stat[C + c] = *sh;
        rm_out[c] = (1.0f - momentum) * rm[c] + momentum * *mean;
        rv_out[c] = (1.0f - momentum) * rv[c] + momentum * var;
    }
}

// Item lid of L normalises chunk g of channel c (rc units), walking it from the end back to the start.
static inline void bn_apply_chunk(const int N, const int C, const int P, const int rc, const int g, const int c,
                                  const int lid, const int L, const float mean, const float a, const float sh,
                                  __global const float* x, __global float* y) {
    const int PU = BN_PU(P);
    __global const BN_T* xu = (__global const BN_T*)x;
    __global BN_T* yu = (__global BN_T*)y;
    const int total = N * PU;
    const int start = min(total, g * rc);
    const int end = min(total, start + rc);
    int j = end - 1 - lid;
#if UNR == 4
    for (; j - 3 * L >= start; j -= 4 * L) {
        int at[4];
        BN_T v[4];
        for (int u = 0; u < 4; ++u) {
            const int jj = j - u * L;
            const int n = jj / PU;
            at[u] = (n * C + c) * PU + (jj - n * PU);
            v[u] = xu[at[u]];
        }
        for (int u = 0; u < 4; ++u) yu[at[u]] = (v[u] - mean) * a + sh;
    }
#endif
    for (; j >= start; j -= L) {
        const int n = j / PU;
        const int at = (n * C + c) * PU + (j - n * PU);
        yu[at] = (xu[at] - mean) * a + sh;
    }
}

// Work-group (g, c) on the statistics pass's grid normalises that pass's chunk g of channel c (rc units),
// walking it from the end back to the start with the same stride: when the statistics pass's groups all run
// at once they read their chunks front to back together, so the ends of every chunk are what the cache still
// holds. Each group folds its channel's partials (bn_fold: the same bits as bn_finish) and the chunk-0
// group's first item writes the channel's statistics.
__kernel void bn_apply_back(const int N, const int C, const int P, const int rc, const int G,
                            const float eps, const float momentum, const int has_gamma, const int has_beta,
                            __global const float* x, __global const float* part, __global const float* gamma,
                            __global const float* beta, __global const float* rm, __global const float* rv,
                            __global float* mean_out, __global float* rstd_out, __global float* stat,
                            __global float* rm_out, __global float* rv_out, __global float* y) {
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    const int g = get_group_id(0);
    const int c = get_group_id(1);
    float mean, a, sh;
    bn_prologue(c, N, C, P, G, eps, momentum, has_gamma, has_beta, g == 0 && lid == 0, x, part, gamma, beta,
                rm, rv, mean_out, rstd_out, stat, rm_out, rv_out, &mean, &a, &sh);
    bn_apply_chunk(N, C, P, rc, g, c, lid, L, mean, a, sh, x, y);
}

// Training batch norm in one launch, (C + 1)·G work-groups of L items. Groups take tickets in the order they
// start. Ticket t < C·G sums chunk t % G of channel t / G and counts it in sync[2 + channel]; ticket t ≥ G
// then waits until all G chunks of channel t / G − 1 are counted and normalises chunk t % G of that channel,
// which the statistics part read a few groups earlier (still cached). A group waits only for groups with
// smaller tickets, which have started and never wait in their statistics part, so every wait ends on a device
// where started work-groups keep running. sync[1] counts finished groups; the last one resets sync[0..C+2)
// to zero for the next launch (the buffer starts zeroed). GPUs only: OpenCL promises no progress between
// work-groups, and on PoCL's CPU device the wait hung.
__kernel void bn_pipe(const int N, const int C, const int P, const int rc, const int G,
                      const float eps, const float momentum, const int has_gamma, const int has_beta,
                      __global const float* x, __global float* part, __global const float* gamma,
                      __global const float* beta, __global const float* rm, __global const float* rv,
                      __global float* mean_out, __global float* rstd_out, __global float* stat,
                      __global float* rm_out, __global float* rv_out, __global float* y,
                      volatile __global int* sync, __local float* ls, __local float* lq) {
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    // The ticket goes through ls[0]; the second barrier keeps the tree from overwriting it before all read it.
    if (lid == 0) ls[0] = as_float(atomic_inc(&sync[0]));
    barrier(CLK_LOCAL_MEM_FENCE);
    const int t = as_int(ls[0]);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t < C * G) {
        const int c = t / G, g = t - (t / G) * G;
        bn_chunk_partial(N, C, P, rc, G, g, c, lid, L, x, part, ls, lq);
        if (lid == 0) {
            mem_fence(CLK_GLOBAL_MEM_FENCE);
            atomic_inc(&sync[2 + c]);
        }
    }
    if (t >= G) {
        const int c = t / G - 1, g = t - (t / G) * G;
        if (lid == 0) {
            // Polls with plain volatile reads rather than atomic read-modify-writes.
            while (sync[2 + c] < G) {
            }
            mem_fence(CLK_GLOBAL_MEM_FENCE);
        }
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
        float mean, a, sh;
        bn_prologue(c, N, C, P, G, eps, momentum, has_gamma, has_beta, g == 0 && lid == 0, x, part, gamma, beta,
                    rm, rv, mean_out, rstd_out, stat, rm_out, rv_out, &mean, &a, &sh);
        bn_apply_chunk(N, C, P, rc, g, c, lid, L, mean, a, sh, x, y);
    }
    if (lid == 0) {
        mem_fence(CLK_GLOBAL_MEM_FENCE);
        if (atomic_inc(&sync[1]) == (C + 1) * G - 1) {
            for (int i = 0; i < C + 2; ++i) atomic_xchg(&sync[i], 0);
        }
    }
}
