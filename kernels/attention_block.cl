// Register-blocked attention for GPUs: the forward and the backward's dq and dk/dv kernels of the `block`
// layout, over the same [BH, S, HD] tensors and with the same results as attention.cl (whose attn_delta the
// backward uses). As gemm_tiled does for a GEMM, every product is computed in 2-D register blocks from float4
// reads of local memory, where attention.cl's tile layout does about one local load per multiply-add.
//
// A work-group of BTY·BTX items owns BQ rows of one (b, h) (query rows; key rows in dk/dv) and streams the
// other side in tiles of BK rows. Item (ty, tx) owns rows ty + BTY·i (i < BLOCK_RQ) and, of each streamed tile,
// columns tx + BTX·j (j < BLOCK_RK): its BLOCK_RQ × BLOCK_RK block of scores costs BLOCK_RQ + BLOCK_RK float4
// loads per 4·BLOCK_RQ·BLOCK_RK multiply-adds. Consecutive tx read consecutive rows, and rows are padded to
// HD + 4 floats, so those reads start in different banks. Probability-like tiles (P, dS) go through local
// memory [BQ][BK + 4]; the item then accumulates its rows times its float4 column groups tx + BTX·n of the
// output, from float4 reads of a P row (4 keys) and of 4 streamed rows.
// Causal: tiles entirely on the masked side are skipped; only tiles that cross the diagonal, or S, mask.
// Exponentials are taken in base 2: scores are scaled by scale·log2(e) and exp2 (one hardware instruction on
// GPUs, where exp needs a range reduction first) gives the same probabilities; the running maxima are in base
// 2, and lse, in the natural base as every layout keeps it, is converted on the way out and in.
//
// Defines: HD (a multiple of 4), BQ, BK, BLOCK_RQ and BLOCK_RK (dividing BQ and BK; BK a multiple of 4).
// ATTN_PART picks the kernels a build holds, so that a launch compiles only what it runs: 1 the forward, 2 the
// backward's dq and dk/dv kernels, 3 the fused backward, 0 (the default) all of them.
#ifndef ATTN_PART
#define ATTN_PART 0
#endif

#ifndef HD
#define HD 64
#endif
#ifndef BQ
#define BQ 32
#endif
#ifndef BK
#define BK 32
#endif
#ifndef BLOCK_RQ
#define BLOCK_RQ 4
#endif
#ifndef BLOCK_RK
#define BLOCK_RK 4
#endif
#define BTY (BQ / BLOCK_RQ)
#define BTX (BK / BLOCK_RK)
#define HD4 (HD / 4)
#define BLD4 (HD4 + 1)
#define BLP4 (BK / 4 + 1)
#define BG ((HD4 + BTX - 1) / BTX)
#define BG_FULL (HD4 % BTX == 0)

// The work-item's (ty, tx), its (b, h) and the first of the group's BQ rows (`r0`), and the offset of the
// (b, h) in q, k, v and their gradients.
#define BLOCK_IDS(r0)                                     \
    const int lid = get_local_id(0);                      \
    const int ty = lid / BTX;                             \
    const int tx = lid - ty * BTX;                        \
    const int nrb_ = (S + BQ - 1) / BQ;                   \
    const int bh = get_group_id(0) / nrb_;                \
    const int r0 = (get_group_id(0) - bh * nrb_) * BQ;    \
    const size_t base = (size_t)bh * S * HD;

// Rows [r0, r0 + NR) of the [S, HD] matrix `src` into the local float4 tile `dst` (row stride BLD4); rows past
// S are zeros, so that a masked probability (0) never meets a NaN.
#define LOAD_BLOCK(dst, src, r0, NR)                                                        \
    for (int e_ = lid; e_ < (NR) * HD4; e_ += BTY * BTX) {                                  \
        const int rr_ = e_ / HD4;                                                           \
        const int cc_ = e_ - rr_ * HD4;                                                     \
        (dst)[rr_ * BLD4 + cc_] = ((r0) + rr_ < S)                                          \
            ? ((__global const float4*)(src))[(size_t)((r0) + rr_) * HD4 + cc_]              \
            : (float4)(0.0f);                                                               \
    }

// t + a·b, one multiply-add per lane, in order (C adds left to right).
#define DOT4_ADD(t, a, b) ((t) + (a).x * (b).x + (a).y * (b).y + (a).z * (b).z + (a).w * (b).w)

// t + p.x·r0 + p.y·r1 + p.z·r2 + p.w·r3: four streamed rows weighted by four probabilities.
#define ROW4_ADD(t, p, r0, r1, r2, r3) ((t) + (p).x * (r0) + (p).y * (r1) + (p).z * (r2) + (p).w * (r3))

// NCL_SHFL 1 (NVIDIA GPUs; the host sets it only for work-groups of whole warps): the BTX items of a row, which
// are consecutive lanes of one warp, combine their partial maxima and sums by `shfl.sync.bfly` exchanges
// instead of through local memory and a barrier. NCL_ASYNC 1 (NVIDIA GPUs of compute capability 8.0 or more):
// the forward's tiles are copied by `cp.async` (16 bytes a copy, zero-filled past S, no registers held) into
// separate key and value tiles, each issued one phase before it is needed, so that the copy of the value tile
// runs under the scores and the copy of the next key tile under the product with V.
#ifndef NCL_ASYNC
#define NCL_ASYNC 0
#endif

// x folded with OP over the BTX items of its row (all of them get the same value).
#if NCL_SHFL
#define ROW_FOLD(x, OP)                                                     \
    {                                                                       \
        for (int m_ = BTX / 2; m_ > 0; m_ >>= 1) x = OP(x, ncl_shfl_xor(x, m_)); \
    }
#endif

#if NCL_ASYNC
// As LOAD_BLOCK, by the prelude's asynchronous copies; the caller commits them (NCL_CP_COMMIT) and waits for
// them (NCL_CP_WAIT).
#define ASYNC_BLOCK(dst, src, r0, NR)                                                 \
    for (int e_ = lid; e_ < (NR) * HD4; e_ += BTY * BTX) {                            \
        const int rr_ = e_ / HD4;                                                     \
        const int cc_ = e_ - rr_ * HD4;                                               \
        const int in_ = (r0) + rr_ < S;                                               \
        const size_t at_ = in_ ? (size_t)((r0) + rr_) * HD4 + cc_ : 0;              \
        ncl_cp_async16((dst) + rr_ * BLD4 + cc_, (__global const float4*)(src) + at_, \
                       in_ ? 16 : 0);                                                 \
    }
#endif

// The forward. The q tile stays in local memory; key and value tiles take turns in one buffer (NCL_ASYNC 0) or
// have one each. Each item's row maxima over its keys are combined across the items of the row (in `red`
// [BQ][BTX], or by shuffles), so the items of a row agree on its maximum and rescale alike. Each item sums the
// probabilities of its own keys; the row sums are combined across the items once, at the end. Writes o and lse
// as attn_fwd_tile does.
#if ATTN_PART == 0 || ATTN_PART == 1
__kernel __attribute__((reqd_work_group_size(BTY * BTX, 1, 1))) void
attn_fwd_block(const int S, const int causal, const float scale, __global const float* q, __global const float* k,
               __global const float* v, __global float* o, __global float* lse) {
    __local float4 qs[BQ * BLD4];
    __local float4 kb[BK * BLD4];
#if NCL_ASYNC
    __local float4 vb[BK * BLD4];
#else
#define vb kb
#endif
    __local float4 ps[BQ * BLP4];
#if !NCL_SHFL
    __local float red[BQ * BTX];
#endif
    __local float* pf = (__local float*)ps;
    BLOCK_IDS(q0)
#if NCL_ASYNC
    ASYNC_BLOCK(qs, q + base, q0, BQ)
    ASYNC_BLOCK(kb, k + base, 0, BK)
    NCL_CP_COMMIT();
#else
    LOAD_BLOCK(qs, q + base, q0, BQ)
#endif
    const float scale2 = scale * M_LOG2E_F;
    float4 acc[BLOCK_RQ][BG];
    float m[BLOCK_RQ];
    float l[BLOCK_RQ];
#pragma unroll
    for (int i = 0; i < BLOCK_RQ; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int n = 0; n < BG; ++n) acc[i][n] = (float4)(0.0f);
    }
    const int kend = causal ? min(S, q0 + BQ) : S;
    for (int k0 = 0; k0 < kend; k0 += BK) {
        barrier(CLK_LOCAL_MEM_FENCE);
#if NCL_ASYNC
        // Every item is past the last tile's product with V: its value tile may be overwritten.
        ASYNC_BLOCK(vb, v + base, k0, BK)
        NCL_CP_COMMIT();
        NCL_CP_WAIT(1);
#else
        LOAD_BLOCK(kb, k + base, k0, BK)
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[BLOCK_RQ][BLOCK_RK];
#pragma unroll
        for (int i = 0; i < BLOCK_RQ; ++i) {
#pragma unroll
            for (int j = 0; j < BLOCK_RK; ++j) s[i][j] = 0.0f;
        }
        // Four steps of d at a time: unrolled whole, the loads run further ahead and hold more registers
        // (clang + ptxas for sm_90 at d = 64: 160 registers against 130), and on an H100 the forward ran 6 %
        // slower.
#pragma unroll 4
        for (int c = 0; c < HD4; ++c) {
            float4 a[BLOCK_RQ];
            float4 b[BLOCK_RK];
#pragma unroll
            for (int i = 0; i < BLOCK_RQ; ++i) a[i] = qs[(ty + BTY * i) * BLD4 + c];
#pragma unroll
            for (int j = 0; j < BLOCK_RK; ++j) b[j] = kb[(tx + BTX * j) * BLD4 + c];
#pragma unroll
            for (int i = 0; i < BLOCK_RQ; ++i) {
#pragma unroll
                for (int j = 0; j < BLOCK_RK; ++j) {
                    s[i][j] = DOT4_ADD(s[i][j], a[i], b[j]);
                }
            }
        }
        // Only a tile that reaches past S or past the block's first row (causal) has keys to mask.
        const bool edge = k0 + BK > S || (causal && k0 + BK - 1 > q0);
        float pm[BLOCK_RQ];
#pragma unroll
        for (int i = 0; i < BLOCK_RQ; ++i) {
            const int qi = q0 + ty + BTY * i;
            pm[i] = -INFINITY;
#pragma unroll
            for (int j = 0; j < BLOCK_RK; ++j) {
                float x = s[i][j] * scale2;
                if (edge) {
                    const int kj = k0 + tx + BTX * j;
                    if (kj >= S || (causal && kj > qi)) x = -INFINITY;
                }
                s[i][j] = x;
                pm[i] = fmax(pm[i], x);
            }
#if NCL_SHFL
            ROW_FOLD(pm[i], fmax)
#else
            red[(ty + BTY * i) * BTX + tx] = pm[i];
#endif
        }
#if !NCL_ASYNC || !NCL_SHFL
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
#if !NCL_ASYNC
        // Every item is past this tile's scores: the value tile may replace the key tile.
        LOAD_BLOCK(vb, v + base, k0, BK)
#endif
#pragma unroll
        for (int i = 0; i < BLOCK_RQ; ++i) {
            const int r = ty + BTY * i;
            float mn = fmax(m[i], pm[i]);
#if !NCL_SHFL
            for (int t = 0; t < BTX; ++t) mn = fmax(mn, red[r * BTX + t]);
#endif
            const float corr = mn == -INFINITY ? 1.0f : exp2(m[i] - mn);
            m[i] = mn;
            float li = l[i] * corr;
#pragma unroll
            for (int n = 0; n < BG; ++n) acc[i][n] *= corr;
#pragma unroll
            for (int j = 0; j < BLOCK_RK; ++j) {
                const float p = s[i][j] == -INFINITY ? 0.0f : exp2(s[i][j] - mn);
                li += p;
                pf[r * (BLP4 * 4) + tx + BTX * j] = p;
            }
            l[i] = li;
        }
#if NCL_ASYNC
        NCL_CP_WAIT(0);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
#if NCL_ASYNC
        // Every item is past this tile's scores: the next key tile may come in under the product with V.
        if (k0 + BK < kend) ASYNC_BLOCK(kb, k + base, k0 + BK, BK)
        NCL_CP_COMMIT();
#endif
#pragma unroll
        for (int c = 0; c < BK / 4; ++c) {
            float4 pr[BLOCK_RQ];
#pragma unroll
            for (int i = 0; i < BLOCK_RQ; ++i) pr[i] = ps[(ty + BTY * i) * BLP4 + c];
#pragma unroll
            for (int n = 0; n < BG; ++n) {
                const int col = tx + BTX * n;
                if (BG_FULL || col < HD4) {
                    const float4 v0 = vb[(4 * c + 0) * BLD4 + col];
                    const float4 v1 = vb[(4 * c + 1) * BLD4 + col];
                    const float4 v2 = vb[(4 * c + 2) * BLD4 + col];
                    const float4 v3 = vb[(4 * c + 3) * BLD4 + col];
#pragma unroll
                    for (int i = 0; i < BLOCK_RQ; ++i) acc[i][n] = ROW4_ADD(acc[i][n], pr[i], v0, v1, v2, v3);
                }
            }
        }
    }
#if NCL_ASYNC
    NCL_CP_WAIT(0);
#endif
#if !NCL_SHFL
    // Every item read `red` for the last tile before the barrier ahead of its P·V, so the row sums can go there.
#pragma unroll
    for (int i = 0; i < BLOCK_RQ; ++i) red[(ty + BTY * i) * BTX + tx] = l[i];
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
#pragma unroll
    for (int i = 0; i < BLOCK_RQ; ++i) {
        const int r = ty + BTY * i;
        const int qi = q0 + r;
#if NCL_SHFL
        float sum = l[i];
        ROW_FOLD(sum, NCL_ADD)
#else
        float sum = 0.0f;
        for (int t = 0; t < BTX; ++t) sum += red[r * BTX + t];
#endif
        if (qi >= S) continue;
        const float il = sum > 0.0f ? 1.0f / sum : 0.0f;
        __global float4* orow = (__global float4*)(o + base + (size_t)qi * HD);
#pragma unroll
        for (int n = 0; n < BG; ++n) {
            const int col = tx + BTX * n;
            if (BG_FULL || col < HD4) orow[col] = acc[i][n] * il;
        }
        if (tx == 0) lse[(size_t)bh * S + qi] = sum > 0.0f ? m[i] * M_LN2_F + log(sum) : -INFINITY;
    }
#undef vb
}
#endif

// dQ: the group owns BQ query rows (q and dO tiles in local memory) and streams key and value tiles. Per tile,
// the item's blocks of scores s = q·k and dp = dO·v come from one pass over d; ds = p·(dp − delta) with
// p = exp(s·scale − lse) goes to the local dS tile, and the item adds dS times the key tile into its dq.
#if ATTN_PART == 0 || ATTN_PART == 2
__kernel __attribute__((reqd_work_group_size(BTY * BTX, 1, 1))) void
attn_dq_block(const int S, const int causal, const float scale, __global const float* q, __global const float* k,
              __global const float* v, __global const float* g, __global const float* lse,
              __global const float* delta, __global float* dq) {
    __local float4 qs[BQ * BLD4];
    __local float4 gs[BQ * BLD4];
    __local float4 ks[BK * BLD4];
    __local float4 vs[BK * BLD4];
    __local float4 ds[BQ * BLP4];
    __local float* df = (__local float*)ds;
    BLOCK_IDS(q0)
    LOAD_BLOCK(qs, q + base, q0, BQ)
    LOAD_BLOCK(gs, g + base, q0, BQ)
    const float scale2 = scale * M_LOG2E_F;
    float lr[BLOCK_RQ];
    float dr[BLOCK_RQ];
    float4 acc[BLOCK_RQ][BG];
#pragma unroll
    for (int i = 0; i < BLOCK_RQ; ++i) {
        const int qi = q0 + ty + BTY * i;
        lr[i] = qi < S ? lse[(size_t)bh * S + qi] * M_LOG2E_F : 0.0f;
        dr[i] = qi < S ? delta[(size_t)bh * S + qi] : 0.0f;
#pragma unroll
        for (int n = 0; n < BG; ++n) acc[i][n] = (float4)(0.0f);
    }
    const int kend = causal ? min(S, q0 + BQ) : S;
    for (int k0 = 0; k0 < kend; k0 += BK) {
        barrier(CLK_LOCAL_MEM_FENCE);
        LOAD_BLOCK(ks, k + base, k0, BK)
        LOAD_BLOCK(vs, v + base, k0, BK)
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[BLOCK_RQ][BLOCK_RK];
        float dp[BLOCK_RQ][BLOCK_RK];
#pragma unroll
        for (int i = 0; i < BLOCK_RQ; ++i) {
#pragma unroll
            for (int j = 0; j < BLOCK_RK; ++j) {
                s[i][j] = 0.0f;
                dp[i][j] = 0.0f;
            }
        }
        // Two steps of d at a time: unrolled whole, the loop's loads are hoisted ahead of its multiply-adds
        // and the registers spill (clang + ptxas for sm_90: 6.8 KB of spill stores in dk/dv and 3.1 KB in dq
        // at d = 64; none at two steps, `scripts/ptx-check.sh`).
#pragma unroll 2
        for (int c = 0; c < HD4; ++c) {
            float4 a[BLOCK_RQ];
            float4 e[BLOCK_RQ];
            float4 b[BLOCK_RK];
            float4 w[BLOCK_RK];
#pragma unroll
            for (int i = 0; i < BLOCK_RQ; ++i) {
                a[i] = qs[(ty + BTY * i) * BLD4 + c];
                e[i] = gs[(ty + BTY * i) * BLD4 + c];
            }
#pragma unroll
            for (int j = 0; j < BLOCK_RK; ++j) {
                b[j] = ks[(tx + BTX * j) * BLD4 + c];
                w[j] = vs[(tx + BTX * j) * BLD4 + c];
            }
#pragma unroll
            for (int i = 0; i < BLOCK_RQ; ++i) {
#pragma unroll
                for (int j = 0; j < BLOCK_RK; ++j) {
                    s[i][j] = DOT4_ADD(s[i][j], a[i], b[j]);
                    dp[i][j] = DOT4_ADD(dp[i][j], e[i], w[j]);
                }
            }
        }
        // Rows past S are never written, so only keys past S and after the row (causal) need the mask.
        const bool edge = k0 + BK > S || (causal && k0 + BK - 1 > q0);
#pragma unroll
        for (int i = 0; i < BLOCK_RQ; ++i) {
            const int r = ty + BTY * i;
#pragma unroll
            for (int j = 0; j < BLOCK_RK; ++j) {
                const int kj = k0 + tx + BTX * j;
                const bool ok = !edge || (kj < S && (!causal || kj <= q0 + r));
                const float p = ok ? exp2(s[i][j] * scale2 - lr[i]) : 0.0f;
                df[r * (BLP4 * 4) + tx + BTX * j] = p * (dp[i][j] - dr[i]);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (int c = 0; c < BK / 4; ++c) {
            float4 dsr[BLOCK_RQ];
#pragma unroll
            for (int i = 0; i < BLOCK_RQ; ++i) dsr[i] = ds[(ty + BTY * i) * BLP4 + c];
#pragma unroll
            for (int n = 0; n < BG; ++n) {
                const int col = tx + BTX * n;
                if (BG_FULL || col < HD4) {
                    const float4 k0v = ks[(4 * c + 0) * BLD4 + col];
                    const float4 k1v = ks[(4 * c + 1) * BLD4 + col];
                    const float4 k2v = ks[(4 * c + 2) * BLD4 + col];
                    const float4 k3v = ks[(4 * c + 3) * BLD4 + col];
#pragma unroll
                    for (int i = 0; i < BLOCK_RQ; ++i) acc[i][n] = ROW4_ADD(acc[i][n], dsr[i], k0v, k1v, k2v, k3v);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < BLOCK_RQ; ++i) {
        const int qi = q0 + ty + BTY * i;
        if (qi >= S) continue;
        __global float4* out = (__global float4*)(dq + base + (size_t)qi * HD);
#pragma unroll
        for (int n = 0; n < BG; ++n) {
            const int col = tx + BTX * n;
            if (BG_FULL || col < HD4) out[col] = acc[i][n] * scale;
        }
    }
}
#endif

// p[0..4) += v (p 16-byte aligned), atomically per float (the prelude's ncl_atomic_add); NCL_RED 4 (NVIDIA
// GPUs of sm_90 and later, PTX 8.1) adds the four with one `red.global.v4.f32.add`.
static inline void attn_add_f32x4(__global float* p, const float4 v) {
#if NCL_RED == 4
    asm volatile("red.global.v4.f32.add [%0], {%1, %2, %3, %4};"
                 :
                 : "l"((ulong)(size_t)p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
#else
    ncl_atomic_add(p, v.x);
    ncl_atomic_add(p + 1, v.y);
    ncl_atomic_add(p + 2, v.z);
    ncl_atomic_add(p + 3, v.w);
#endif
}

// Query rows of a streamed tile per item in the fused backward's dq product (4 when BQ == BK, the only layout
// the host launches it with; any other build compiles it all the same).
#define DQR (BK / BTY > 0 ? BK / BTY : 1)

#if NCL_ASYNC
// One element of a row term (lse or delta) of query qi into dst by an asynchronous 4-byte copy; zero past S.
#define ASYNC_TERM(dst, src, qi) ncl_cp_async4((dst), (src) + ((qi) < S ? (qi) : 0), (qi) < S ? 4 : 0);
// The streamed tile of the dK/dV kernels from query row i0 (q, dO, lse and delta), by asynchronous copies.
#define DKV_TILE_ASYNC(i0)                                                          \
    {                                                                               \
        ASYNC_BLOCK(qs, q + base, (i0), BK)                                         \
        ASYNC_BLOCK(gs, g + base, (i0), BK)                                         \
        for (int t_ = lid; t_ < BK; t_ += BTY * BTX) {                              \
            ASYNC_TERM(lt + t_, lse + (size_t)bh * S, (i0) + t_)                    \
            ASYNC_TERM(dt + t_, delta + (size_t)bh * S, (i0) + t_)                  \
        }                                                                           \
    }
#endif

// dK, dV: the group owns BQ key rows (k and v tiles in local memory) and streams query tiles of BK rows (q and
// dO, with their lse and delta). Per tile, the item's blocks of sᵀ = k·q and dpᵀ = v·dO give pᵀ and
// dsᵀ = pᵀ·(dpᵀ − delta), both through local memory; the item adds pᵀ times the dO tile into its dv and dsᵀ
// times the q tile into its dk. A causal group starts at its own first key row (earlier queries see none of
// its keys). With NCL_ASYNC the next tile's q, dO, lse and delta are copied by `cp.async` as soon as every
// item is past the current tile's dk and dv products, so that the copies run under the dq product (fused) or
// the next tile's wait.
//
// With `dq` (attn_bwd_block, the fused backward) each tile's dS also gives that tile's share of dq,
// dq[t] += scale·Σ_r dS[r][t]·k[r], which the group adds into the zeroed dq atomically: the scores are computed
// once for all three gradients (attn_dq_block recomputes both products), at the price of one atomic add per
// element of dq per group of key rows. Item (ty, tx) owns query rows DQR·ty + i of the tile and the float4
// columns tx + BTX·n, reading DQR consecutive dS values of a key row at once.
static inline __attribute__((always_inline)) void
attn_dkv_tiles(const int S, const int causal, const float scale, __global const float* q,
                           __global const float* k, __global const float* v, __global const float* g,
                           __global const float* lse, __global const float* delta, __global float* dk,
                           __global float* dv, __global float* dq, __local float4* ks, __local float4* vs,
                           __local float4* qs, __local float4* gs, __local float4* ps, __local float4* ds,
                           __local float* lt, __local float* dt) {
    __local float* pf = (__local float*)ps;
    __local float* df = (__local float*)ds;
    BLOCK_IDS(j0)
    const float scale2 = scale * M_LOG2E_F;
    const int istart = causal ? j0 : 0;
#if NCL_ASYNC
    ASYNC_BLOCK(ks, k + base, j0, BQ)
    ASYNC_BLOCK(vs, v + base, j0, BQ)
    DKV_TILE_ASYNC(istart)
    NCL_CP_COMMIT();
#else
    LOAD_BLOCK(ks, k + base, j0, BQ)
    LOAD_BLOCK(vs, v + base, j0, BQ)
#endif
    float4 ak[BLOCK_RQ][BG];
    float4 av[BLOCK_RQ][BG];
#pragma unroll
    for (int i = 0; i < BLOCK_RQ; ++i) {
#pragma unroll
        for (int n = 0; n < BG; ++n) {
            ak[i][n] = (float4)(0.0f);
            av[i][n] = (float4)(0.0f);
        }
    }
    for (int i0 = istart; i0 < S; i0 += BK) {
#if NCL_ASYNC
        NCL_CP_WAIT(0);
#else
        barrier(CLK_LOCAL_MEM_FENCE);
        LOAD_BLOCK(qs, q + base, i0, BK)
        LOAD_BLOCK(gs, g + base, i0, BK)
        for (int t = lid; t < BK; t += BTY * BTX) {
            const int qi = i0 + t;
            lt[t] = qi < S ? lse[(size_t)bh * S + qi] : 0.0f;
            dt[t] = qi < S ? delta[(size_t)bh * S + qi] : 0.0f;
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[BLOCK_RQ][BLOCK_RK];
        float dp[BLOCK_RQ][BLOCK_RK];
#pragma unroll
        for (int i = 0; i < BLOCK_RQ; ++i) {
#pragma unroll
            for (int j = 0; j < BLOCK_RK; ++j) {
                s[i][j] = 0.0f;
                dp[i][j] = 0.0f;
            }
        }
        // Two steps of d at a time: unrolled whole, the loop's loads are hoisted ahead of its multiply-adds
        // and the registers spill (clang + ptxas for sm_90: 6.8 KB of spill stores in dk/dv and 3.1 KB in dq
        // at d = 64; none at two steps, `scripts/ptx-check.sh`).
#pragma unroll 2
        for (int c = 0; c < HD4; ++c) {
            float4 a[BLOCK_RQ];
            float4 e[BLOCK_RQ];
            float4 b[BLOCK_RK];
            float4 w[BLOCK_RK];
#pragma unroll
            for (int i = 0; i < BLOCK_RQ; ++i) {
                a[i] = ks[(ty + BTY * i) * BLD4 + c];
                e[i] = vs[(ty + BTY * i) * BLD4 + c];
            }
#pragma unroll
            for (int j = 0; j < BLOCK_RK; ++j) {
                b[j] = qs[(tx + BTX * j) * BLD4 + c];
                w[j] = gs[(tx + BTX * j) * BLD4 + c];
            }
#pragma unroll
            for (int i = 0; i < BLOCK_RQ; ++i) {
#pragma unroll
                for (int j = 0; j < BLOCK_RK; ++j) {
                    s[i][j] = DOT4_ADD(s[i][j], a[i], b[j]);
                    dp[i][j] = DOT4_ADD(dp[i][j], e[i], w[j]);
                }
            }
        }
        // Queries past S feed every key row's sums, so they are masked (as are queries before a key, causal).
        const bool edge = i0 + BK > S || (causal && j0 + BQ - 1 > i0);
#pragma unroll
        for (int i = 0; i < BLOCK_RQ; ++i) {
            const int r = ty + BTY * i;
#pragma unroll
            for (int j = 0; j < BLOCK_RK; ++j) {
                const int t = tx + BTX * j;
                const int qi = i0 + t;
                const bool ok = !edge || (qi < S && (!causal || qi >= j0 + r));
                const float p = ok ? exp2(s[i][j] * scale2 - lt[t] * M_LOG2E_F) : 0.0f;
                pf[r * (BLP4 * 4) + t] = p;
                df[r * (BLP4 * 4) + t] = ok ? p * (dp[i][j] - dt[t]) : 0.0f;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
        for (int c = 0; c < BK / 4; ++c) {
            float4 pr[BLOCK_RQ];
            float4 dsr[BLOCK_RQ];
#pragma unroll
            for (int i = 0; i < BLOCK_RQ; ++i) {
                pr[i] = ps[(ty + BTY * i) * BLP4 + c];
                dsr[i] = ds[(ty + BTY * i) * BLP4 + c];
            }
#pragma unroll
            for (int n = 0; n < BG; ++n) {
                const int col = tx + BTX * n;
                if (BG_FULL || col < HD4) {
                    const float4 g0 = gs[(4 * c + 0) * BLD4 + col];
                    const float4 g1 = gs[(4 * c + 1) * BLD4 + col];
                    const float4 g2 = gs[(4 * c + 2) * BLD4 + col];
                    const float4 g3 = gs[(4 * c + 3) * BLD4 + col];
                    const float4 q0v = qs[(4 * c + 0) * BLD4 + col];
                    const float4 q1v = qs[(4 * c + 1) * BLD4 + col];
                    const float4 q2v = qs[(4 * c + 2) * BLD4 + col];
                    const float4 q3v = qs[(4 * c + 3) * BLD4 + col];
#pragma unroll
                    for (int i = 0; i < BLOCK_RQ; ++i) {
                        av[i][n] = ROW4_ADD(av[i][n], pr[i], g0, g1, g2, g3);
                        ak[i][n] = ROW4_ADD(ak[i][n], dsr[i], q0v, q1v, q2v, q3v);
                    }
                }
            }
        }
#if NCL_ASYNC
        // Every item is past this tile's q, dO, lse and delta: the next tile's come in under the dq product.
        barrier(CLK_LOCAL_MEM_FENCE);
        if (i0 + BK < S) DKV_TILE_ASYNC(i0 + BK)
        NCL_CP_COMMIT();
#endif
        if (dq) {
            // dS and the k tile stay as they are until the next tile's first barrier.
            float4 aq[DQR][BG];
#pragma unroll
            for (int i = 0; i < DQR; ++i) {
#pragma unroll
                for (int n = 0; n < BG; ++n) aq[i][n] = (float4)(0.0f);
            }
#pragma unroll 4
            for (int r = 0; r < BQ; ++r) {
                float wv[DQR];
                if (DQR % 4 == 0) {
#pragma unroll
                    for (int u = 0; u < DQR / 4; ++u) {
                        const float4 x = ds[r * BLP4 + ty * (DQR / 4) + u];
                        wv[4 * u] = x.x;
                        wv[4 * u + 1] = x.y;
                        wv[4 * u + 2] = x.z;
                        wv[4 * u + 3] = x.w;
                    }
                } else {
#pragma unroll
                    for (int i = 0; i < DQR; ++i) wv[i] = df[r * (BLP4 * 4) + ty * DQR + i];
                }
#pragma unroll
                for (int n = 0; n < BG; ++n) {
                    const int col = tx + BTX * n;
                    if (BG_FULL || col < HD4) {
                        const float4 kr = ks[r * BLD4 + col];
#pragma unroll
                        for (int i = 0; i < DQR; ++i) aq[i][n] += wv[i] * kr;
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < DQR; ++i) {
                const int qi = i0 + ty * DQR + i;
                if (ty * DQR + i >= BK || qi >= S) continue;
                __global float* row = dq + base + (size_t)qi * HD;
#pragma unroll
                for (int n = 0; n < BG; ++n) {
                    const int col = tx + BTX * n;
                    if (BG_FULL || col < HD4) attn_add_f32x4(row + 4 * col, aq[i][n] * scale);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < BLOCK_RQ; ++i) {
        const int kj = j0 + ty + BTY * i;
        if (kj >= S) continue;
        __global float4* ok_ = (__global float4*)(dk + base + (size_t)kj * HD);
        __global float4* ov_ = (__global float4*)(dv + base + (size_t)kj * HD);
#pragma unroll
        for (int n = 0; n < BG; ++n) {
            const int col = tx + BTX * n;
            if (BG_FULL || col < HD4) {
                ok_[col] = ak[i][n] * scale;
                ov_[col] = av[i][n];
            }
        }
    }
}

// The local tiles of attn_dkv_tiles, declared in a kernel (OpenCL C allows __local variables only there).
#define DKV_LOCALS                  \
    __local float4 ks[BQ * BLD4];   \
    __local float4 vs[BQ * BLD4];   \
    __local float4 qs[BK * BLD4];   \
    __local float4 gs[BK * BLD4];   \
    __local float4 ps[BQ * BLP4];   \
    __local float4 ds[BQ * BLP4];   \
    __local float lt[BK];           \
    __local float dt[BK];

#if ATTN_PART == 0 || ATTN_PART == 2
__kernel __attribute__((reqd_work_group_size(BTY * BTX, 1, 1))) void
attn_dkv_block(const int S, const int causal, const float scale, __global const float* q, __global const float* k,
               __global const float* v, __global const float* g, __global const float* lse,
               __global const float* delta, __global float* dk, __global float* dv) {
    DKV_LOCALS
    attn_dkv_tiles(S, causal, scale, q, k, v, g, lse, delta, dk, dv, (__global float*)0, ks, vs, qs, gs, ps, ds,
                   lt, dt);
}
#endif

// The fused backward: dk and dv as attn_dkv_block, and dq added atomically into a dq the host has zeroed.
#if ATTN_PART == 0 || ATTN_PART == 3
__kernel __attribute__((reqd_work_group_size(BTY * BTX, 1, 1))) void
attn_bwd_block(const int S, const int causal, const float scale, __global const float* q, __global const float* k,
               __global const float* v, __global const float* g, __global const float* lse,
               __global const float* delta, __global float* dk, __global float* dv, __global float* dq) {
    DKV_LOCALS
    attn_dkv_tiles(S, causal, scale, q, k, v, g, lse, delta, dk, dv, dq, ks, vs, qs, gs, ps, ds, lt, dt);
}
#endif
