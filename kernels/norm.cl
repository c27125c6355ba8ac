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
//                    channel's chunk once that channel is complete (see the kernel);
//   bn_hold:         everything in one launch reading x once (GPUs): each group keeps its chunk in registers
//                    until its channel's statistics are complete.
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
// The work-group's sums of its items' s and q, left in ls[0] and lq[0]; every item takes part.
static inline void bn_group_sum(const int lid, const int L, const float s, const float q, __local float* ls,
                                __local float* lq) {
    ls[lid] = s;
    lq[lid] = q;
    bn_tree(lid, L, ls, lq);
}

// The shifted sums of chunk g of channel c over the work-group (bn_sums, then the tree), in ls[0] and lq[0].
static inline void bn_chunk_tree(const int N, const int C, const int P, const int rc, const int g, const int c,
                                 const int lid, const int L, __global const float* x, __local float* ls,
                                 __local float* lq) {
    float s, q;
    bn_sums(N, C, P, rc, g, c, lid, L, x, &s, &q);
    bn_group_sum(lid, L, s, q, ls, lq);
}

static inline void bn_chunk_partial(const int N, const int C, const int P, const int rc, const int G,
                                    const int g, const int c, const int lid, const int L,
                                    __global const float* x, __global float* part, __local float* ls,
                                    __local float* lq) {
    bn_chunk_tree(N, C, P, rc, g, c, lid, L, x, ls, lq);
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

// Mean, variance and 1/√(var + ε) of channel c from its shifted sums s and q.
static inline void bn_moments(const int c, const int N, const int P, const float eps, __global const float* x,
                              const float s, const float q, float* mean, float* var, float* rstd) {
    const float cnt = (float)N * (float)P;
    const float d = s / cnt;
    *mean = bn_shift(x, c, P) + d;
    float v = q / cnt - d * d;
    // Rounding can make a tiny variance negative; a NaN stays NaN.
    *var = v < 0.0f ? 0.0f : v;
    *rstd = 1.0f / sqrt(*var + eps);
}

// Channel c's statistics from its G partials, in a fixed order (every caller gets the same bits).
static inline void bn_fold(const int c, const int N, const int P, const int G, const float eps,
                           __global const float* x, __global const float* part, float* mean, float* var,
                           float* rstd) {
    float s = 0.0f, q = 0.0f;
    for (int g = 0; g < G; ++g) {
        s += part[(c * G + g) * 2];
        q += part[(c * G + g) * 2 + 1];
    }
    bn_moments(c, N, P, eps, x, s, q, mean, var, rstd);
}

// The normalising pass's scale a = γ·rstd and shift sh = β of channel c; `write` stores the channel's
// statistics and running statistics.
static inline void bn_scale(const int c, const int C, const float momentum, const int has_gamma,
                            const int has_beta, const bool write, __global const float* gamma,
                            __global const float* beta, __global const float* rm, __global const float* rv,
                            __global float* mean_out, __global float* rstd_out, __global float* stat,
                            __global float* rm_out, __global float* rv_out, const float mean, const float var,
                            const float rstd, float* a, float* sh) {
    *a = has_gamma ? gamma[c] * rstd : rstd;
    *sh = has_beta ? beta[c] : 0.0f;
    if (write) {
        mean_out[c] = mean;
        rstd_out[c] = rstd;
        stat[c] = *a;
        stat[C + c] = *sh;
        rm_out[c] = (1.0f - momentum) * rm[c] + momentum * mean;
        rv_out[c] = (1.0f - momentum) * rv[c] + momentum * var;
    }
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
    float mean, var, rstd, a, sh;
    bn_fold(c, N, P, G, eps, x, part, &mean, &var, &rstd);
    bn_scale(c, C, momentum, has_gamma, has_beta, true, gamma, beta, rm, rv, mean_out, rstd_out, stat, rm_out,
             rv_out, mean, var, rstd, &a, &sh);
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
                               __global const float* x, __global const float* part,
                               __global const float* gamma, __global const float* beta,
                               __global const float* rm, __global const float* rv, __global float* mean_out,
                               __global float* rstd_out, __global float* stat, __global float* rm_out,
                               __global float* rv_out, float* mean, float* a, float* sh) {
    float var, rstd;
    bn_fold(c, N, P, G, eps, x, part, mean, &var, &rstd);
    bn_scale(c, C, momentum, has_gamma, has_beta, write, gamma, beta, rm, rv, mean_out, rstd_out, stat, rm_out,
             rv_out, *mean, var, rstd, a, sh);
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

// ------------------------------------------------------------------------------------ one-launch kernels
// bn_pipe and bn_hold wait inside the launch for partials that other work-groups of the same launch write.
// Each partial travels as two 64-bit slots, the float's bits below and the launch's tag above, written and
// read as single 64-bit words: a waiting group knows a slot is complete when it carries this launch's tag,
// with no counter whose update could become visible before the data it announces. The host gives every
// launch a new non-zero tag, so slots left in a reused buffer by earlier launches never match.
// A wait is bounded (POLLS reads of one slot, by default 2^15: about 10 ms on a GPU, well under a millisecond
// on a CPU);
// a group that stops waiting sums the channel itself, chunk by chunk with the same code, order and tree as
// the groups it waited for, so it gets the same bits: slow but correct on any device, including devices that
// do not run work-groups side by side (OpenCL promises no progress between work-groups).
// Tickets: sync[0] hands them out in the order groups start; sync[1] counts finished groups, and the last one
// resets both to zero for the next launch (the buffer starts zeroed).
#ifndef POLLS
#define POLLS 32768
#endif

static inline void bn_publish(volatile __global ulong* slots, const int i, const uint tag, const float s,
                              const float q) {
    slots[2 * i] = ((ulong)tag << 32) | (ulong)as_uint(s);
    slots[2 * i + 1] = ((ulong)tag << 32) | (ulong)as_uint(q);
}

// The work-group's ticket (every item gets it); ls[0] carries it.
static inline int bn_ticket(volatile __global int* sync, const int lid, __local float* ls) {
    if (lid == 0) ls[0] = as_float(atomic_inc(&sync[0]));
    barrier(CLK_LOCAL_MEM_FENCE);
    const int t = as_int(ls[0]);
    barrier(CLK_LOCAL_MEM_FENCE);
    return t;
}

static inline void bn_finished(volatile __global int* sync, const int lid, const int groups) {
    if (lid == 0 && atomic_inc(&sync[1]) == groups - 1) {
        atomic_xchg(&sync[0], 0);
        atomic_xchg(&sync[1], 0);
    }
}

// Items wait side by side for the G partials from index `first` on to carry `tag` and copy them into ls[0..G), lq[0..G)
// (both hold at least G floats); the channel's shifted sums are then added in bn_fold's order. Returns
// whether every partial arrived within the bound; every item takes part and gets the same answer.
static inline bool bn_gather(volatile __global const ulong* slots, const int first, const int G,
                             const uint tag, const int lid, const int L, __local float* ls, __local float* lq,
                             __local int* miss, float* s, float* q) {
    if (lid == 0) *miss = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = lid; h < G; h += L) {
        ulong a = 0, b = 0;
        bool ok = false;
        for (int polls = 0; polls < POLLS && !ok; ++polls) {
            a = slots[2 * (first + h)];
            b = slots[2 * (first + h) + 1];
            ok = (uint)(a >> 32) == tag && (uint)(b >> 32) == tag;
        }
        if (!ok) *miss = 1;
        ls[h] = as_float((uint)a);
        lq[h] = as_float((uint)b);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const bool all = *miss == 0;
    float ss = 0.0f, qq = 0.0f;
    for (int g = 0; g < G; ++g) {
        ss += ls[g];
        qq += lq[g];
    }
    *s = ss;
    *q = qq;
    barrier(CLK_LOCAL_MEM_FENCE);
    return all;
}

// The argument list both one-launch kernels share.
#define BN_ONE_LAUNCH_ARGS                                                                                   \
    const int N, const int C, const int P, const int rc, const int G, const float eps, const float momentum,  \
        const int has_gamma, const int has_beta, __global const float *x, volatile __global ulong *part,     \
        __global const float *gamma, __global const float *beta, __global const float *rm,                   \
        __global const float *rv, __global float *mean_out, __global float *rstd_out, __global float *stat,  \
        __global float *rm_out, __global float *rv_out, __global float *y, volatile __global int *sync,      \
        __local float *ls, __local float *lq, const uint tag

// Training batch norm in one launch, (C + 1)·G work-groups of L items. Ticket t < C·G sums chunk t % G of
// channel t / G (bn_sums and the tree, as bn_partial_wg) and publishes it; ticket t ≥ G then waits for the G
// partials of channel t / G − 1 and normalises chunk t % G of that channel, which the statistics part read a
// few groups earlier (still cached). A group waits only for groups with smaller tickets, which have started
// and never wait in their statistics part, so on a device where started work-groups keep running every wait
// ends before its bound.
__kernel void bn_pipe(BN_ONE_LAUNCH_ARGS) {
    __local int miss;
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    const int t = bn_ticket(sync, lid, ls);
    // Both parts run in every group, the one a group does not have over an empty chunk: the control flow
    // around the barriers stays the same for every group.
    const bool sums = t < C * G, norm = t >= G;
    const int g = t - (t / G) * G;
    const int cs = sums ? t / G : 0, cn = norm ? t / G - 1 : 0;
    float s, q;
    bn_chunk_tree(N, C, P, sums ? rc : 0, g, cs, lid, L, x, ls, lq);
    if (sums && lid == 0) bn_publish(part, cs * G + g, tag, ls[0], lq[0]);
    barrier(CLK_LOCAL_MEM_FENCE);
    const bool all = bn_gather(part, cn * G, norm ? G : 0, tag, lid, L, ls, lq, &miss, &s, &q);
    // Past the bound: the channel's sums from x, chunk by chunk as the groups that published them.
    if (!all) {
        s = 0.0f;
        q = 0.0f;
    }
    for (int h = 0; h < (all ? 0 : G); ++h) {
        bn_chunk_tree(N, C, P, rc, h, cn, lid, L, x, ls, lq);
        s += ls[0];
        q += lq[0];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float mean, var, rstd, a, sh;
    bn_moments(cn, N, P, eps, x, s, q, &mean, &var, &rstd);
    bn_scale(cn, C, momentum, has_gamma, has_beta, norm && g == 0 && lid == 0, gamma, beta, rm, rv, mean_out,
             rstd_out, stat, rm_out, rv_out, mean, var, rstd, &a, &sh);
    bn_apply_chunk(N, C, P, norm ? rc : 0, g, cn, lid, L, mean, a, sh, x, y);
    bn_finished(sync, lid, (C + 1) * G);
}

#ifndef HOLD
#define HOLD 8
#endif

// Item lid of L loads its HOLD units of chunk g of channel c (rc ≤ L·HOLD units) into v, their addresses into
// at (−1 past the chunk), and adds the shifted values to *su and *qu in unit order.
static inline void bn_hold_load(const int N, const int C, const int P, const int rc, const int g, const int c,
                                const int lid, const int L, const float k, __global const float* x,
                                BN_T* v, int* at, BN_T* su, BN_T* qu) {
    const int PU = BN_PU(P);
    __global const BN_T* xu = (__global const BN_T*)x;
    const int total = N * PU;
    const int start = g * rc;
    const int end = min(total, start + rc);
    for (int r = 0; r < HOLD; ++r) {
        const int j = start + lid + r * L;
        const int n = j / PU;
        at[r] = j < end ? (n * C + c) * PU + (j - n * PU) : -1;
        v[r] = at[r] >= 0 ? xu[at[r]] : (BN_T)(0.0f);
    }
    for (int r = 0; r < HOLD; ++r) {
        if (at[r] >= 0) {
            const BN_T d = v[r] - k;
            *su += d;
            *qu = fma(d, d, *qu);
        }
    }
}

// Training batch norm in one launch that reads x once: C·G work-groups of L items, each holding one chunk of
// at most L·HOLD units in registers. Ticket t sums chunk t % G of channel t / G and publishes it, waits for
// the channel's G partials, and normalises the chunk it still holds. The partials a group waits for may come
// from later tickets, so the waits end quickly only when a channel's G groups fit on the device at once
// (GPUs); otherwise the bound and the group's own sums (which reload its chunk afterwards) take over.
__kernel void bn_hold(BN_ONE_LAUNCH_ARGS) {
    __local int miss;
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    const int t = bn_ticket(sync, lid, ls);
    const int c = t / G, g = t - (t / G) * G;
    const float k = bn_shift(x, c, P);
    BN_T v[HOLD];
    int at[HOLD];
    BN_T su = (BN_T)(0.0f), qu = (BN_T)(0.0f);
    bn_hold_load(N, C, P, rc, g, c, lid, L, k, x, v, at, &su, &qu);
    bn_group_sum(lid, L, BN_HSUM(su), BN_HSUM(qu), ls, lq);
    if (lid == 0) bn_publish(part, c * G + g, tag, ls[0], lq[0]);
    barrier(CLK_LOCAL_MEM_FENCE);
    float s, q;
    const bool all = bn_gather(part, c * G, G, tag, lid, L, ls, lq, &miss, &s, &q);
    // Past the bound: the channel's sums from x, chunk by chunk as the groups that published them, and then
    // this group's chunk again (the loop overwrote v).
    if (!all) {
        s = 0.0f;
        q = 0.0f;
    }
    for (int h = 0; h < (all ? 0 : G + 1); ++h) {
        BN_T hs = (BN_T)(0.0f), hq = (BN_T)(0.0f);
        bn_hold_load(N, C, P, rc, h < G ? h : g, c, lid, L, k, x, v, at, &hs, &hq);
        bn_group_sum(lid, L, BN_HSUM(hs), BN_HSUM(hq), ls, lq);
        if (h < G) {
            s += ls[0];
            q += lq[0];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float mean, var, rstd, a, sh;
    bn_moments(c, N, P, eps, x, s, q, &mean, &var, &rstd);
    bn_scale(c, C, momentum, has_gamma, has_beta, g == 0 && lid == 0, gamma, beta, rm, rv, mean_out, rstd_out,
             stat, rm_out, rv_out, mean, var, rstd, &a, &sh);
    __global BN_T* yu = (__global BN_T*)y;
    for (int r = 0; r < HOLD; ++r) {
        if (at[r] >= 0) yu[at[r]] = (v[r] - mean) * a + sh;
    }
    bn_finished(sync, lid, C * G);
}

// ------------------------------------------------------------------------------------------------ backward
// The training backward per channel c, with M = N·P elements, the forward's mean and rstd, x̂ = (x − mean)·rstd
// and the output gradient g:
//   S1 = Σ g,  S2 = Σ g·(x − mean);   dβ = S1,  dγ = rstd·S2,
//   dx = γ·rstd·(g − S1/M − (x − mean)·rstd²·S2/M).
// Two launches replace the composed path's reductions and elementwise passes, x and g are read twice:
//   bn_back_partial_wg:   S1 and S2 of chunk g of channel c per work-group, on bn_partial_wg's grid (GPUs);
//   bn_back_partial_item: the same, one work-item per (chunk, channel) with float8 loads (CPU);
//   bn_back_apply_back:   dx on the partial pass's grid, each group walking its chunk from the end (what that
//                         pass read last is still cached) and folding its channel's partials; the chunk-0
//                         group writes dγ and dβ (GPUs);
//   bn_back_apply_plane:  dx with one work-item per (n, c) plane and float8 loads; the plane n = 0 writes dγ
//                         and dβ (CPU).
// The partials are folded in a fixed order, so every group of a channel uses the same S1 and S2.
// With MASK the layer's output h went through an activation whose gradient every kernel applies to g first (the
// activation's backward pass folded in): MASK 1 is ReLU (g where h > 0), MASK 2 a clamp to [lo, hi] (g where
// lo ≤ h ≤ hi, ReLU6 with 0 and 6). Without MASK, h, lo and hi are never read.

#ifndef MASK
#define MASK 0
#endif
#if MASK == 1
#define BNB_G(T, g, h) select((T)(0.0f), (g), isgreater((h), (T)(0.0f)))
#elif MASK == 2
#define BNB_G(T, g, h) select((T)(0.0f), (g), isgreaterequal((h), (T)(lo)) & islessequal((h), (T)(hi)))
#else
#define BNB_G(T, g, h) (g)
#endif

// S1 and S2 of chunk g of channel c over item lid of L (strided units, as bn_sums).
static inline void bnb_sums(const int N, const int C, const int P, const int rc, const int g, const int c,
                            const int lid, const int L, __global const float* x, __global const float* gr,
                            __global const float* h, const float lo, const float hi, const float m, float* s1,
                            float* s2) {
    const int PU = BN_PU(P);
    const int total = N * PU;
    __global const BN_T* xu = (__global const BN_T*)x;
    __global const BN_T* gu = (__global const BN_T*)gr;
    __global const BN_T* hu = (__global const BN_T*)h;
    BN_T a = (BN_T)(0.0f), b = (BN_T)(0.0f);
    const int start = min(total, g * rc);
    const int end = min(total, start + rc);
    int j = start + lid;
#if UNR == 4
    for (; j + 3 * L < end; j += 4 * L) {
        BN_T vx[4], vg[4];
        for (int u = 0; u < 4; ++u) {
            const int jj = j + u * L;
            const int n = jj / PU;
            const int at = (n * C + c) * PU + (jj - n * PU);
            vx[u] = xu[at];
            vg[u] = BNB_G(BN_T, gu[at], hu[at]);
        }
        for (int u = 0; u < 4; ++u) {
            a += vg[u];
            b = fma(vg[u], vx[u] - m, b);
        }
    }
#endif
    for (; j < end; j += L) {
        const int n = j / PU;
        const int at = (n * C + c) * PU + (j - n * PU);
        const BN_T v = BNB_G(BN_T, gu[at], hu[at]);
        a += v;
        b = fma(v, xu[at] - m, b);
    }
    *s1 = BN_HSUM(a);
    *s2 = BN_HSUM(b);
}

__kernel void bn_back_partial_wg(const int N, const int C, const int P, const int rc, const int G,
                                 const float lo, const float hi, __global const float* x,
                                 __global const float* gr, __global const float* h,
                                 __global const float* mean, __global float* part, __local float* ls,
                                 __local float* lq) {
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    const int g = get_group_id(0);
    const int c = get_group_id(1);
    float s1, s2;
    bnb_sums(N, C, P, rc, g, c, lid, L, x, gr, h, lo, hi, mean[c], &s1, &s2);
    bn_group_sum(lid, L, s1, s2, ls, lq);
    if (lid == 0) {
        part[(c * G + g) * 2] = ls[0];
        part[(c * G + g) * 2 + 1] = lq[0];
    }
}

__kernel void bn_back_partial_item(const int N, const int C, const int P, const int rc, const int G,
                                   const float lo, const float hi, __global const float* x,
                                   __global const float* gr, __global const float* h,
                                   __global const float* mean, __global float* part) {
    const int g = get_global_id(0);
    const int c = get_global_id(1);
    if (g >= G || c >= C) return;
    const float m = mean[c];
    const int total = N * P;
    const int start = min(total, g * rc);
    const int end = min(total, start + rc);
    float8 a8 = (float8)(0.0f), b8 = (float8)(0.0f);
    float a = 0.0f, b = 0.0f;
    int j = start;
    while (j < end) {
        // One plane segment [j, stop) at a time: contiguous in memory.
        const int n = j / P;
        const int stop = min(end, (n + 1) * P);
        const int off = (n * C + c) * P - n * P;
        for (; j + 8 <= stop; j += 8) {
            const float8 v = BNB_G(float8, vload8(0, gr + off + j), vload8(0, h + off + j));
            a8 += v;
            b8 = fma(v, vload8(0, x + off + j) - m, b8);
        }
        for (; j < stop; ++j) {
            const float v = BNB_G(float, gr[off + j], h[off + j]);
            a += v;
            b = fma(v, x[off + j] - m, b);
        }
    }
    const float4 sa = a8.lo + a8.hi, sb = b8.lo + b8.hi;
    part[(c * G + g) * 2] = a + (sa.s0 + sa.s1) + (sa.s2 + sa.s3);
    part[(c * G + g) * 2 + 1] = b + (sb.s0 + sb.s1) + (sb.s2 + sb.s3);
}

// Channel c's dx coefficients from its G partials: dx = k1·g + k2·(x − mean) + k3. `write` stores dγ and dβ.
static inline void bnb_coeffs(const int c, const int N, const int P, const int G, const int has_gamma,
                              const bool write, __global const float* part, __global const float* rstd,
                              __global const float* gamma, __global float* dgamma, __global float* dbeta,
                              float* k1, float* k2, float* k3) {
    float s1 = 0.0f, s2 = 0.0f;
    for (int g = 0; g < G; ++g) {
        s1 += part[(c * G + g) * 2];
        s2 += part[(c * G + g) * 2 + 1];
    }
    const float r = rstd[c];
    const float inv_m = 1.0f / ((float)N * (float)P);
    const float a = has_gamma ? gamma[c] * r : r;
    *k1 = a;
    *k2 = -a * r * r * s2 * inv_m;
    *k3 = -a * s1 * inv_m;
    if (write) {
        dgamma[c] = r * s2;
        dbeta[c] = s1;
    }
}

__kernel void bn_back_apply_back(const int N, const int C, const int P, const int rc, const int G,
                                 const int has_gamma, const float lo, const float hi, __global const float* x,
                                 __global const float* gr, __global const float* h,
                                 __global const float* mean, __global const float* rstd,
                                 __global const float* gamma, __global const float* part, __global float* dx,
                                 __global float* dgamma, __global float* dbeta) {
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    const int g = get_group_id(0);
    const int c = get_group_id(1);
    float k1, k2, k3;
    bnb_coeffs(c, N, P, G, has_gamma, g == 0 && lid == 0, part, rstd, gamma, dgamma, dbeta, &k1, &k2, &k3);
    const float m = mean[c];
    const BN_T K1 = (BN_T)(k1), K2 = (BN_T)(k2), K3 = (BN_T)(k3);
    const int PU = BN_PU(P);
    __global const BN_T* xu = (__global const BN_T*)x;
    __global const BN_T* gu = (__global const BN_T*)gr;
    __global const BN_T* hu = (__global const BN_T*)h;
    __global BN_T* du = (__global BN_T*)dx;
    const int total = N * PU;
    const int start = min(total, g * rc);
    const int end = min(total, start + rc);
    int j = end - 1 - lid;
#if UNR == 4
    for (; j - 3 * L >= start; j -= 4 * L) {
        int at[4];
        BN_T vx[4], vg[4];
        for (int u = 0; u < 4; ++u) {
            const int jj = j - u * L;
            const int n = jj / PU;
            at[u] = (n * C + c) * PU + (jj - n * PU);
            vx[u] = xu[at[u]];
            vg[u] = BNB_G(BN_T, gu[at[u]], hu[at[u]]);
        }
        for (int u = 0; u < 4; ++u) du[at[u]] = fma(vg[u], K1, fma(vx[u] - m, K2, K3));
    }
#endif
    for (; j >= start; j -= L) {
        const int n = j / PU;
        const int at = (n * C + c) * PU + (j - n * PU);
        du[at] = fma(BNB_G(BN_T, gu[at], hu[at]), K1, fma(xu[at] - m, K2, K3));
    }
}

__kernel void bn_back_apply_plane(const int planes, const int C, const int P, const int G, const int N,
                                  const int has_gamma, const float lo, const float hi,
                                  __global const float* x, __global const float* gr, __global const float* h,
                                  __global const float* mean, __global const float* rstd,
                                  __global const float* gamma, __global const float* part, __global float* dx,
                                  __global float* dgamma, __global float* dbeta) {
    const int t = get_global_id(0);
    if (t >= planes) return;
    const int c = t % C;
    float k1, k2, k3;
    bnb_coeffs(c, N, P, G, has_gamma, t < C, part, rstd, gamma, dgamma, dbeta, &k1, &k2, &k3);
    const float m = mean[c];
    const float8 K1 = (float8)(k1), K2 = (float8)(k2), K3 = (float8)(k3);
    const int off = t * P;
    int j = 0;
    for (; j + 8 <= P; j += 8) {
        const float8 v = BNB_G(float8, vload8(0, gr + off + j), vload8(0, h + off + j));
        vstore8(fma(v, K1, fma(vload8(0, x + off + j) - m, K2, K3)), 0, dx + off + j);
    }
    for (; j < P; ++j) {
        dx[off + j] = fma(BNB_G(float, gr[off + j], h[off + j]), k1, fma(x[off + j] - m, k2, k3));
    }
}
