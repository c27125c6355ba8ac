// GEMM family: C[z] = op(A[b]) (M x K) * op(B[b]) (K x N) over the k-range of split s, with z = b * S + s.
//
// op(A)[m][k] = TRANS_A ? A[k * lda + m] : A[m * lda + k];  op(B)[k][n] = TRANS_B ? B[n * ldb + k] : B[k * ldb + n].
// A batch b starts at offA + b * sA (likewise B); the output of z starts at offC + z * sC. With S > 1 every
// split writes its own partial product and `gemm_reduce_splits` sums them; with S == 1 the epilogue (bias per
// row or per column, ReLU) is applied directly.
//
// Four kernel shapes, chosen by the autotuner per device and shape class:
//  * gemm_tiled   double-buffered local-memory tiles (TM x TN x TK per work-group, RM x RN per work-item, float4
//                 local reads, float4 global loads of the next tile into registers); the GPU kernel.
//  * gemm_packed  barrier-free register blocking on panels packed by gemm_pack_a / gemm_pack_b
//                 (MR rows x NR = VW * NB columns per work-item, VW-wide vectors); the CPU OpenCL kernel.
//  * gemm_reg     the same register blocking reading A and B in place (no packing pass; TRANS_B == 0 only).
//  * gemm_smallk  K <= 64 without transposes: columns of B in registers, rows of A broadcast from local memory.
//  * gemm_simple  one program for every product (transposes are arguments), small enough to compile in a
//                 fraction of the others' time: a GPU's first calls run it while the chosen kernel is built.

#ifndef TRANS_A
#define TRANS_A 0
#endif
#ifndef TRANS_B
#define TRANS_B 0
#endif

#if TRANS_A
#define OPA(A, m, k, lda) (A)[(k) * (lda) + (m)]
#else
#define OPA(A, m, k, lda) (A)[(m) * (lda) + (k)]
#endif
#if TRANS_B
#define OPB(B, k, n, ldb) (B)[(n) * (ldb) + (k)]
#else
#define OPB(B, k, n, ldb) (B)[(k) * (ldb) + (n)]
#endif

// Epilogue for one element: bias_mode 1 adds bias[m], 2 adds bias[n]; relu clamps at 0 (NaN stays NaN).
inline float gemm_epilogue(float v, __global const float* bias, int bias_mode, int relu, int m, int n) {
    if (bias_mode == 1) v += bias[m];
    else if (bias_mode == 2) v += bias[n];
    if (relu) v = v < 0.0f ? 0.0f : v;
    return v;
}

// ------------------------------------------------------------------------------------------------ gemm_tiled
// TM x TN x TK tiles per work-group and RM x RN outputs per work-item, read from local memory as float4 rows.
// Two local buffers: while one K tile is multiplied, the next one (already in float4 registers) is stored into
// the other, so there is one barrier per K tile. With VEC, work-groups whose tile lies inside the matrices load
// and store float4 (VEC needs lda, ldb, ldc, the offsets and the batch strides to be multiples of 4; the host
// checks); edge tiles, and every tile without VEC, take the guarded scalar path and read zeros outside.
//
// FLAT folds the batches into the columns: a product whose A is shared by every batch (sA == 0) and whose B is
// not transposed is computed as one M x (batches * CB) product, N being batches * CB and the grid's third
// dimension 1, so the last column tile of one batch does not run half empty (pointwise convolutions: CB is the
// number of pixels). Column n belongs to batch n / CB; its B and C elements sit at that batch's offset. The
// host sets FLAT only with VEC and CB a multiple of 4, so no float4 quad straddles two batches.
//
// KS > 1 slices each K tile among KS layers of work-items (the work-group's third dimension): every layer
// multiplies TK / KS rows of the tile into its own RM x RN accumulators, and the layers add theirs into layer 0
// in layer order through local memory before the epilogue. All KS layers share the tile loads. Products with few
// outputs per batch (a short M, as in pointwise convolutions with few output channels) thereby keep KS times
// more work-items busy without a second launch.
#ifdef TM
#ifndef KS
#define KS 1
#endif
#define WX (TN / RN)
#define WY (TM / RM)
#define NT (WX * WY * KS)
#ifndef PAD
#define PAD 4
#endif
#define LDS_A (TM + PAD)
#define LDS_B (TN + PAD)
#define A4 (TM * TK / 4)
#define B4 (TN * TK / 4)
#define LA ((A4 + NT - 1) / NT)
#define LB ((B4 + NT - 1) / NT)
#ifndef VEC
#define VEC 0
#endif
#ifndef FLAT
#define FLAT 0
#endif

// Local memory: the two tile buffers, which the K-sliced reduction reuses (TM x TN floats) once they are read.
#define TILE4 (2 * TK * (LDS_A + LDS_B) / 4)
#if KS > 1 && TM * TN / 4 > TILE4
#define SMEM4 (TM * TN / 4)
#else
#define SMEM4 TILE4
#endif

__kernel __attribute__((reqd_work_group_size(WX, WY, KS)))
void gemm_tiled(const int M, const int N, const int K,
                __global const float* restrict A, const int offA, const int lda, const int sA,
                __global const float* restrict B, const int offB, const int ldb, const int sB,
                __global float* restrict C, const int offC, const int ldc, const int sC,
                const int S, const int L,
                __global const float* restrict bias, const int bias_mode, const int relu,
                const int CB)
{
    const int tx = get_local_id(0), ty = get_local_id(1), tz = get_local_id(2);
    const int tid = (tz * WY + ty) * WX + tx;
    const int n0 = get_group_id(0) * TN, m0 = get_group_id(1) * TM;
    const int z = get_group_id(2);
    const int b = z / S, s = z - (z / S) * S;
    const int k0 = s * L;
    const int k1 = min(K, k0 + L);
    __global const float* Ab = A + offA + (size_t)b * sA;
    __global const float* Bb = B + offB + (size_t)b * sB;
    const bool inside = VEC && m0 + TM <= M && n0 + TN <= N;
#if FLAT
    // The offset of each B quad's column within B (batch offset included); fixed for the whole K loop.
    int bcol[LB];
#pragma unroll
    for (int l = 0; l < LB; ++l) {
        const int nn = ((tid + l * NT) % (TN / 4)) * 4;
        const int n = n0 + nn, bb = n / CB;
        bcol[l] = bb * sB + (n - bb * CB);
    }
#define BCOL(l, n) bcol[l]
#else
#define BCOL(l, n) (n)
#endif

    __local float4 smem[SMEM4];
    __local float4* As4 = smem;
    __local float4* Bs4 = smem + 2 * TK * LDS_A / 4;

    float4 ra[LA], rb[LB];
    float acc[RM][RN];
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = 0.0f;

    // Quad l of a tile: along k for an untransposed A (transposed B), along m (n) otherwise, so that every
    // float4 is contiguous in global memory. A quad past the matrix or the split reads zeros. Quads along k are
    // stored as four scalars, one per local row: with padded rows, neighbouring work-items take neighbouring
    // quads of one row (long contiguous global runs); without padding (PAD 0, tiles that fill local memory),
    // neighbouring work-items take neighbouring rows, so that their scalar stores fall in distinct banks.
#if PAD
#define ALONG_K(q, rows, r, kk) const int r = (q) / (TK / 4), kk = ((q) % (TK / 4)) * 4;
#else
#define ALONG_K(q, rows, r, kk) const int r = (q) % (rows), kk = ((q) / (rows)) * 4;
#endif
#define QUAD_A(l, mm, kk)                                                                      \
    const int qa = tid + (l) * NT;                                                            \
    ALONG_K(qa, TM, mk_, kk_)                                                                  \
    const int mm = TRANS_A ? (qa % (TM / 4)) * 4 : mk_;                                      \
    const int kk = TRANS_A ? qa / (TM / 4) : kk_;
#define QUAD_B(l, nn, kk)                                                                      \
    const int qb = tid + (l) * NT;                                                            \
    ALONG_K(qb, TN, nk_, kk_)                                                                  \
    const int nn = TRANS_B ? nk_ : (qb % (TN / 4)) * 4;                                      \
    const int kk = TRANS_B ? kk_ : qb / (TN / 4);

#define LOAD_TILE(kt)                                                                        \
    {                                                                                          \
        const bool fast = inside && (kt) + TK <= k1;                                          \
        _Pragma("unroll") for (int l = 0; l < LA; ++l) {                                       \
            QUAD_A(l, mm, kk)                                                                  \
            const int m = m0 + mm, k = (kt) + kk;                                              \
            if (fast && qa < A4) {                                                             \
                ra[l] = TRANS_A ? *(__global const float4*)(Ab + (size_t)k * lda + m)          \
                                : *(__global const float4*)(Ab + (size_t)m * lda + k);         \
            } else {                                                                           \
                float4 v = (float4)(0.0f);                                                     \
                if (qa < A4) {                                                                 \
                    if (TRANS_A) {                                                             \
                        if (k < k1) {                                                          \
                            if (m < M) v.s0 = OPA(Ab, m, k, lda);                              \
                            if (m + 1 < M) v.s1 = OPA(Ab, m + 1, k, lda);                      \
                            if (m + 2 < M) v.s2 = OPA(Ab, m + 2, k, lda);                      \
                            if (m + 3 < M) v.s3 = OPA(Ab, m + 3, k, lda);                      \
                        }                                                                      \
                    } else if (m < M) {                                                        \
                        if (k < k1) v.s0 = OPA(Ab, m, k, lda);                                 \
                        if (k + 1 < k1) v.s1 = OPA(Ab, m, k + 1, lda);                         \
                        if (k + 2 < k1) v.s2 = OPA(Ab, m, k + 2, lda);                         \
                        if (k + 3 < k1) v.s3 = OPA(Ab, m, k + 3, lda);                         \
                    }                                                                          \
                }                                                                              \
                ra[l] = v;                                                                     \
            }                                                                                  \
        }                                                                                      \
        _Pragma("unroll") for (int l = 0; l < LB; ++l) {                                       \
            QUAD_B(l, nn, kk)                                                                  \
            const int n = n0 + nn, k = (kt) + kk;                                              \
            if (fast && qb < B4) {                                                             \
                rb[l] = TRANS_B ? *(__global const float4*)(Bb + (size_t)n * ldb + k)          \
                                : *(__global const float4*)(Bb + (size_t)k * ldb + BCOL(l, n)); \
            } else {                                                                           \
                float4 v = (float4)(0.0f);                                                     \
                if (qb < B4) {                                                                 \
                    if (!TRANS_B) {                                                            \
                        if (k < k1) {                                                          \
                            const int c = BCOL(l, n);                                          \
                            if (n < N) v.s0 = OPB(Bb, k, c, ldb);                              \
                            if (n + 1 < N) v.s1 = OPB(Bb, k, c + 1, ldb);                      \
                            if (n + 2 < N) v.s2 = OPB(Bb, k, c + 2, ldb);                      \
                            if (n + 3 < N) v.s3 = OPB(Bb, k, c + 3, ldb);                      \
                        }                                                                      \
                    } else if (n < N) {                                                        \
                        if (k < k1) v.s0 = OPB(Bb, k, n, ldb);                                 \
                        if (k + 1 < k1) v.s1 = OPB(Bb, k + 1, n, ldb);                         \
                        if (k + 2 < k1) v.s2 = OPB(Bb, k + 2, n, ldb);                         \
                        if (k + 3 < k1) v.s3 = OPB(Bb, k + 3, n, ldb);                         \
                    }                                                                          \
                }                                                                              \
                rb[l] = v;                                                                     \
            }                                                                                  \
        }                                                                                      \
    }
    // Registers -> local buffer `buf`, k-major rows.
#define STORE_TILE(buf)                                                                      \
    {                                                                                          \
        __local float* as = (__local float*)(As4 + (buf) * (TK * LDS_A / 4));                 \
        __local float* bs = (__local float*)(Bs4 + (buf) * (TK * LDS_B / 4));                 \
        _Pragma("unroll") for (int l = 0; l < LA; ++l) {                                       \
            QUAD_A(l, mm, kk)                                                                  \
            if (qa < A4) {                                                                     \
                if (TRANS_A) {                                                                 \
                    *(__local float4*)(as + kk * LDS_A + mm) = ra[l];                          \
                } else {                                                                       \
                    as[(kk + 0) * LDS_A + mm] = ra[l].s0;                                      \
                    as[(kk + 1) * LDS_A + mm] = ra[l].s1;                                      \
                    as[(kk + 2) * LDS_A + mm] = ra[l].s2;                                      \
                    as[(kk + 3) * LDS_A + mm] = ra[l].s3;                                      \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        _Pragma("unroll") for (int l = 0; l < LB; ++l) {                                       \
            QUAD_B(l, nn, kk)                                                                  \
            if (qb < B4) {                                                                     \
                if (!TRANS_B) {                                                                \
                    *(__local float4*)(bs + kk * LDS_B + nn) = rb[l];                          \
                } else {                                                                       \
                    bs[(kk + 0) * LDS_B + nn] = rb[l].s0;                                      \
                    bs[(kk + 1) * LDS_B + nn] = rb[l].s1;                                      \
                    bs[(kk + 2) * LDS_B + nn] = rb[l].s2;                                      \
                    bs[(kk + 3) * LDS_B + nn] = rb[l].s3;                                      \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }

    int buf = 0;
    LOAD_TILE(k0)
    STORE_TILE(0)
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int kt = k0; kt < k1; kt += TK) {
        const bool more = kt + TK < k1;
        if (more) LOAD_TILE(kt + TK)
        __local const float4* as4 = As4 + buf * (TK * LDS_A / 4);
        __local const float4* bs4 = Bs4 + buf * (TK * LDS_B / 4);
#pragma unroll
        for (int kq = 0; kq < TK / KS; ++kq) {
            const int kk = tz * (TK / KS) + kq;
            float a[RM], bv[RN];
#pragma unroll
            for (int g = 0; g < RM / 4; ++g) {
                const float4 v = as4[kk * (LDS_A / 4) + g * WY + ty];
                a[g * 4 + 0] = v.s0; a[g * 4 + 1] = v.s1; a[g * 4 + 2] = v.s2; a[g * 4 + 3] = v.s3;
            }
#pragma unroll
            for (int g = 0; g < RN / 4; ++g) {
                const float4 v = bs4[kk * (LDS_B / 4) + g * WX + tx];
                bv[g * 4 + 0] = v.s0; bv[g * 4 + 1] = v.s1; bv[g * 4 + 2] = v.s2; bv[g * 4 + 3] = v.s3;
            }
#pragma unroll
            for (int i = 0; i < RM; ++i)
#pragma unroll
                for (int j = 0; j < RN; ++j) acc[i][j] = fma(a[i], bv[j], acc[i][j]);
        }
        if (more) STORE_TILE(buf ^ 1)
        barrier(CLK_LOCAL_MEM_FENCE);
        buf ^= 1;
    }
#undef LOAD_TILE
#undef STORE_TILE
#undef QUAD_A
#undef QUAD_B
#undef ALONG_K
#undef BCOL

#if KS > 1
    // Layers 1..KS-1 hand their sums to layer 0 one at a time (a fixed order, so the result does not depend on
    // timing); the tile buffers are free, as the K loop ended on a barrier.
    {
        __local float* red = (__local float*)smem;
        const int t1 = ty * WX + tx;
        for (int l = 1; l < KS; ++l) {
            if (tz == l) {
#pragma unroll
                for (int i = 0; i < RM; ++i)
#pragma unroll
                    for (int j = 0; j < RN; ++j) red[(i * RN + j) * (WX * WY) + t1] = acc[i][j];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (tz == 0) {
#pragma unroll
                for (int i = 0; i < RM; ++i)
#pragma unroll
                    for (int j = 0; j < RN; ++j) acc[i][j] += red[(i * RN + j) * (WX * WY) + t1];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    if (tz != 0) return;
#endif

    __global float* Cz = C + offC + (size_t)z * sC;
#if FLAT
    int ccol[RN / 4];
#pragma unroll
    for (int g = 0; g < RN / 4; ++g) {
        const int n = n0 + g * WX * 4 + tx * 4, bb = n / CB;
        ccol[g] = bb * sC + (n - bb * CB);
    }
#endif
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        const int m = m0 + (i / 4) * WY * 4 + ty * 4 + (i % 4);
#pragma unroll
        for (int g = 0; g < RN / 4; ++g) {
            const int n = n0 + g * WX * 4 + tx * 4;
#if FLAT
            const int cn = ccol[g];
#else
            const int cn = n;
#endif
            float4 v = (float4)(acc[i][g * 4 + 0], acc[i][g * 4 + 1], acc[i][g * 4 + 2], acc[i][g * 4 + 3]);
            if (inside) {
                if (S == 1) {
                    v.s0 = gemm_epilogue(v.s0, bias, bias_mode, relu, m, n);
                    v.s1 = gemm_epilogue(v.s1, bias, bias_mode, relu, m, n + 1);
                    v.s2 = gemm_epilogue(v.s2, bias, bias_mode, relu, m, n + 2);
                    v.s3 = gemm_epilogue(v.s3, bias, bias_mode, relu, m, n + 3);
                }
                *(__global float4*)(Cz + (size_t)m * ldc + cn) = v;
            } else if (m < M) {
                __global float* c = Cz + (size_t)m * ldc + cn;
                const float e[4] = {v.s0, v.s1, v.s2, v.s3};
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    if (n + q < N) c[q] = S == 1 ? gemm_epilogue(e[q], bias, bias_mode, relu, m, n + q) : e[q];
            }
        }
    }
}
#undef A4
#undef B4
#undef TILE4
#undef SMEM4
#endif

// ------------------------------------------------------------------------------------------------ gemm_smallk
// Short reductions (K = SK <= 64, neither operand transposed; pointwise convolutions with few input channels,
// the Winograd products; K < SK reads zeros): each work-item keeps PX columns of B (SK values each) in registers and walks every
// row of A, which the work-group stages MT rows at a time in local memory and every work-item reads at the same
// address (a broadcast). Loads of B and stores of C are coalesced along n; no K tiling, one barrier pair per MT
// rows. Work-groups of LS work-items along n, batches along dimension 1. The argument list is gemm_tiled's without its last (CB);
// S (K splits) is always 1 and L unused.
#ifdef SK
#define MT 64
__kernel __attribute__((reqd_work_group_size(LS, 1, 1)))
void gemm_smallk(const int M, const int N, const int K,
                 __global const float* restrict A, const int offA, const int lda, const int sA,
                 __global const float* restrict B, const int offB, const int ldb, const int sB,
                 __global float* restrict C, const int offC, const int ldc, const int sC,
                 const int S, const int L,
                 __global const float* restrict bias, const int bias_mode, const int relu)
{
    __local float As[MT * SK];
    const int lid = get_local_id(0);
    const int b = get_group_id(1);
    const int nb = get_group_id(0) * (LS * PX) + lid;
    __global const float* Ab = A + offA + (size_t)b * sA;
    __global const float* Bb = B + offB + (size_t)b * sB;
    __global float* Cb = C + offC + (size_t)b * sC;
    float xr[PX][SK];
#pragma unroll
    for (int q = 0; q < PX; ++q) {
        const int n = nb + q * LS;
#pragma unroll
        for (int c = 0; c < SK; ++c) xr[q][c] = (n < N && c < K) ? Bb[(size_t)c * ldb + n] : 0.0f;
    }
    for (int m0 = 0; m0 < M; m0 += MT) {
        const int rows = min(MT, M - m0);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = lid; i < rows * SK; i += LS) {
            const int r = i / SK, c = i - r * SK;
            As[i] = c < K ? Ab[(size_t)(m0 + r) * lda + c] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = 0; r < rows; ++r) {
            float acc[PX];
#pragma unroll
            for (int q = 0; q < PX; ++q) acc[q] = 0.0f;
#pragma unroll
            for (int c = 0; c < SK; ++c) {
                const float a = As[r * SK + c];
#pragma unroll
                for (int q = 0; q < PX; ++q) acc[q] = fma(a, xr[q][c], acc[q]);
            }
            const int m = m0 + r;
#pragma unroll
            for (int q = 0; q < PX; ++q) {
                const int n = nb + q * LS;
                if (n < N) Cb[(size_t)m * ldc + n] = gemm_epilogue(acc[q], bias, bias_mode, relu, m, n);
            }
        }
    }
}
#undef MT
#endif

// ------------------------------------------------------------------------------------------------ CPU kernels
#ifdef MR
#define NR (VW * NB)
#if VW == 16
#define VT float16
#define VLOAD vload16
#define VSTORE vstore16
#elif VW == 8
#define VT float8
#define VLOAD vload8
#define VSTORE vstore8
#else
#define VT float4
#define VLOAD vload4
#define VSTORE vstore4
#endif

// Packing runs KC consecutive k per work-item: per-work-item overhead dominates short work-items on CPU
// OpenCL, and a run of k reads each source row sequentially.
#define KC 32

// Ap[b][panel][k][MR] = op(A[b])[panel * MR + r][k], zero beyond M. One work-item per (k-run, panel, b).
__kernel void gemm_pack_a(const int M, const int K,
                          __global const float* restrict A, const int offA, const int lda, const int sA,
                          __global float* restrict Ap)
{
    const int k0 = get_global_id(0) * KC, p = get_global_id(1), b = get_global_id(2);
    const int panels = (M + MR - 1) / MR;
    if (k0 >= K || p >= panels) return;
    const int k1 = min(K, k0 + KC);
    __global const float* Ab = A + offA + (size_t)b * sA;
    __global float* dst = Ap + ((size_t)b * panels + p) * K * MR;
#if TRANS_A
    for (int k = k0; k < k1; ++k)
        for (int r = 0; r < MR; ++r) {
            const int m = p * MR + r;
            dst[k * MR + r] = m < M ? Ab[(size_t)k * lda + m] : 0.0f;
        }
#else
    for (int r = 0; r < MR; ++r) {
        const int m = p * MR + r;
        for (int k = k0; k < k1; ++k) dst[k * MR + r] = m < M ? Ab[(size_t)m * lda + k] : 0.0f;
    }
#endif
}

// Bp[b][panel][k][NR] = op(B[b])[k][panel * NR + c], zero beyond N. One work-item per (k-run, panel, b).
__kernel void gemm_pack_b(const int N, const int K,
                          __global const float* restrict B, const int offB, const int ldb, const int sB,
                          __global float* restrict Bp)
{
    const int k0 = get_global_id(0) * KC, p = get_global_id(1), b = get_global_id(2);
    const int panels = (N + NR - 1) / NR;
    if (k0 >= K || p >= panels) return;
    const int k1 = min(K, k0 + KC);
    __global const float* Bb = B + offB + (size_t)b * sB;
    __global float* dst = Bp + ((size_t)b * panels + p) * K * NR;
    const int n0 = p * NR;
#if TRANS_B
    for (int c = 0; c < NR; ++c) {
        const int n = n0 + c;
        for (int k = k0; k < k1; ++k) dst[k * NR + c] = n < N ? Bb[(size_t)n * ldb + k] : 0.0f;
    }
#else
    for (int k = k0; k < k1; ++k) {
        if (n0 + NR <= N) {
            for (int v = 0; v < NB; ++v) VSTORE(VLOAD(0, Bb + (size_t)k * ldb + n0 + v * VW), 0, dst + k * NR + v * VW);
        } else {
            for (int c = 0; c < NR; ++c) {
                const int n = n0 + c;
                dst[k * NR + c] = n < N ? Bb[(size_t)k * ldb + n] : 0.0f;
            }
        }
    }
#endif
}

// Stores one MR x NR register block (rows m0.., columns n0..) with bounds checks and the epilogue.
#define STORE_BLOCK()                                                                                      \
    __global float* Cz = C + offC + (size_t)z * sC;                                                        \
    const int full = (n0 + NR <= N) && S == 1 && bias_mode == 0 && !relu;                                  \
    for (int r = 0; r < MR; ++r) {                                                       \
        const int m = m0 + r;                                                                              \
        if (m < M) {                                                                                       \
            if (full) {                                                                                    \
                for (int v = 0; v < NB; ++v) VSTORE(acc[r][v], 0, Cz + (size_t)m * ldc + n0 + v * VW); \
            } else {                                                                                       \
                for (int v = 0; v < NB; ++v) {                                           \
                    float t[VW];                                                                           \
                    VSTORE(acc[r][v], 0, t);                                                               \
                    for (int c = 0; c < VW; ++c) {                                                         \
                        const int n = n0 + v * VW + c;                                                     \
                        if (n < N) Cz[(size_t)m * ldc + n] = S == 1 ? gemm_epilogue(t[c], bias, bias_mode, relu, m, n) : t[c]; \
                    }                                                                                      \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
    }

// One MR x NR block per work-item from packed panels; no local memory, no barriers. sAp is the packed A
// batch stride (0 when every batch shares A, e.g. conv weights).
__kernel void gemm_packed(const int M, const int N, const int K,
                          __global const float* restrict Ap, const int sAp,
                          __global const float* restrict Bp, const int sBp,
                          __global float* restrict C, const int offC, const int ldc, const int sC,
                          const int S, const int L,
                          __global const float* restrict bias, const int bias_mode, const int relu)
{
    const int pn = get_global_id(0), pm = get_global_id(1), z = get_global_id(2);
    const int n0 = pn * NR, m0 = pm * MR;
    if (n0 >= N || m0 >= M) return;
    const int b = z / S, s = z - (z / S) * S;
    const int k0 = s * L;
    const int k1 = min(K, k0 + L);
    __global const float* a = Ap + (size_t)b * sAp + ((size_t)pm * K + k0) * MR;
    __global const float* bp = Bp + (size_t)b * sBp + ((size_t)pn * K + k0) * NR;
    VT acc[MR][NB];
#pragma unroll
    for (int r = 0; r < MR; ++r)
#pragma unroll
        for (int v = 0; v < NB; ++v) acc[r][v] = (VT)(0.0f);
    for (int k = k0; k < k1; ++k) {
        VT bv[NB];
#pragma unroll
        for (int v = 0; v < NB; ++v) bv[v] = VLOAD(v, bp);
#pragma unroll
        for (int r = 0; r < MR; ++r) {
            const VT av = (VT)(a[r]);
#pragma unroll
            for (int v = 0; v < NB; ++v) acc[r][v] = fma(av, bv[v], acc[r][v]);
        }
        a += MR;
        bp += NR;
    }
    STORE_BLOCK()
}

#if !TRANS_B
// One MR x NR block per work-item straight from A and B (rows past M are clamped for loading and not stored).
__kernel void gemm_reg(const int M, const int N, const int K,
                       __global const float* restrict A, const int offA, const int lda, const int sA,
                       __global const float* restrict B, const int offB, const int ldb, const int sB,
                       __global float* restrict C, const int offC, const int ldc, const int sC,
                       const int S, const int L,
                       __global const float* restrict bias, const int bias_mode, const int relu)
{
    const int pn = get_global_id(0), pm = get_global_id(1), z = get_global_id(2);
    const int n0 = pn * NR, m0 = pm * MR;
    if (n0 >= N || m0 >= M) return;
    const int b = z / S, s = z - (z / S) * S;
    const int k0 = s * L;
    const int k1 = min(K, k0 + L);
    __global const float* Ab = A + offA + (size_t)b * sA;
    __global const float* Bb = B + offB + (size_t)b * sB;
    int mr[MR];
#pragma unroll
    for (int r = 0; r < MR; ++r) mr[r] = min(m0 + r, M - 1);
    VT acc[MR][NB];
#pragma unroll
    for (int r = 0; r < MR; ++r)
#pragma unroll
        for (int v = 0; v < NB; ++v) acc[r][v] = (VT)(0.0f);
    if (n0 + NR <= N) {
        for (int k = k0; k < k1; ++k) {
            VT bv[NB];
#pragma unroll
            for (int v = 0; v < NB; ++v) bv[v] = VLOAD(0, Bb + (size_t)k * ldb + n0 + v * VW);
#pragma unroll
            for (int r = 0; r < MR; ++r) {
                const VT av = (VT)(OPA(Ab, mr[r], k, lda));
#pragma unroll
                for (int v = 0; v < NB; ++v) acc[r][v] = fma(av, bv[v], acc[r][v]);
            }
        }
    } else {
        for (int k = k0; k < k1; ++k) {
            VT bv[NB];
#pragma unroll
            for (int v = 0; v < NB; ++v) {
                float t[VW];
                for (int c = 0; c < VW; ++c) {
                    const int n = n0 + v * VW + c;
                    t[c] = n < N ? Bb[(size_t)k * ldb + n] : 0.0f;
                }
                bv[v] = VLOAD(0, t);
            }
#pragma unroll
            for (int r = 0; r < MR; ++r) {
                const VT av = (VT)(OPA(Ab, mr[r], k, lda));
#pragma unroll
                for (int v = 0; v < NB; ++v) acc[r][v] = fma(av, bv[v], acc[r][v]);
            }
        }
    }
    STORE_BLOCK()
}
#endif
#endif

// ------------------------------------------------------------------------------------------------ gemm_simple
// 64 x 64 outputs per work-group of 16 x 16, 4 x 4 per work-item (rows ty + 16 i, columns tx + 16 j, so that stores
// and local reads are contiguous across a row of work-items), K tiles of 16 through local memory. The transposes
// are arguments (ta, tb), so one build serves every product; loads follow whichever index is contiguous in
// memory. No splits (S == 1). It compiles quickly because nothing is specialised and little is unrolled; it is
// several times slower than gemm_tiled and runs only until the chosen kernel is ready.
#define SP_T 64
#define SP_K 16
__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void gemm_simple(const int M, const int N, const int K,
                 __global const float* restrict A, const int offA, const int lda, const int sA, const int ta,
                 __global const float* restrict B, const int offB, const int ldb, const int sB, const int tb,
                 __global float* restrict C, const int offC, const int ldc, const int sC,
                 __global const float* restrict bias, const int bias_mode, const int relu)
{
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int tid = ty * 16 + tx;
    const int n0 = get_group_id(0) * SP_T, m0 = get_group_id(1) * SP_T;
    const int b = get_group_id(2);
    __global const float* Ab = A + offA + (size_t)b * sA;
    __global const float* Bb = B + offB + (size_t)b * sB;
    // op(A)(m, k) = Ab[m * am + k * ak]; op(B)(k, n) = Bb[k * bk + n * bn].
    const int am = ta ? 1 : lda, ak = ta ? lda : 1;
    const int bk = tb ? 1 : ldb, bn = tb ? ldb : 1;
    __local float As[SP_K][SP_T + 1];
    __local float Bs[SP_K][SP_T + 1];
    float acc[4][4];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += SP_K) {
        for (int l = 0; l < 4; ++l) {
            const int e = tid + 256 * l;
            // Consecutive work-items walk the index that is contiguous in memory.
            const int ai = ak == 1 ? e / SP_K : e % SP_T, aq = ak == 1 ? e % SP_K : e / SP_T;
            const int m = m0 + ai, k = k0 + aq;
            As[aq][ai] = (m < M && k < K) ? Ab[(size_t)m * am + (size_t)k * ak] : 0.0f;
            const int bi = bn == 1 ? e % SP_T : e / SP_K, bq = bn == 1 ? e / SP_T : e % SP_K;
            const int n = n0 + bi, kb = k0 + bq;
            Bs[bq][bi] = (n < N && kb < K) ? Bb[(size_t)kb * bk + (size_t)n * bn] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int q = 0; q < SP_K; ++q) {
            float a[4], c[4];
            for (int i = 0; i < 4; ++i) a[i] = As[q][ty + 16 * i];
            for (int j = 0; j < 4; ++j) c[j] = Bs[q][tx + 16 * j];
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) acc[i][j] = fma(a[i], c[j], acc[i][j]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    __global float* Cb = C + offC + (size_t)b * sC;
    for (int i = 0; i < 4; ++i) {
        const int m = m0 + ty + 16 * i;
        if (m >= M) continue;
        for (int j = 0; j < 4; ++j) {
            const int n = n0 + tx + 16 * j;
            if (n < N) Cb[(size_t)m * ldc + n] = gemm_epilogue(acc[i][j], bias, bias_mode, relu, m, n);
        }
    }
}

// ------------------------------------------------------------------------------------------------ split-K
// C[b] (M x N, leading dimension ldc) = sum over s of P[b * S + s] (M x N dense), plus the epilogue.
__kernel void gemm_reduce_splits(const int M, const int N, const int S,
                                 __global const float* restrict P,
                                 __global float* restrict C, const int offC, const int ldc, const int sC,
                                 __global const float* restrict bias, const int bias_mode, const int relu)
{
    const int n = get_global_id(0), m = get_global_id(1), b = get_global_id(2);
    if (n >= N || m >= M) return;
    const size_t mn = (size_t)M * N;
    __global const float* p = P + (size_t)b * S * mn + (size_t)m * N + n;
    float acc = 0.0f;
    for (int s = 0; s < S; ++s) acc += p[(size_t)s * mn];
    C[offC + (size_t)b * sC + (size_t)m * ldc + n] = gemm_epilogue(acc, bias, bias_mode, relu, m, n);
}
