// Tensor-core GEMM: C[z] = op(A[z]) · op(B[z]) (+ bias per row, ReLU) with the warp-level mma.sync of PTX,
// reached from OpenCL C through inline assembly (NVIDIA's OpenCL compiler accepts `asm volatile` as CUDA does).
//
// Defines (every one has a default, so the family builds as it stands):
//   TC_PTX   1: the mma and the tf32 rounding are PTX instructions; 0: they are emulated in OpenCL C (below), so
//            that any device runs the same tile loads, fragment layouts, edges and epilogue.
//   PREC     0: TF32 (mma.m16n8k8, operands rounded to nearest, ties away from zero); 1: FP16 (mma.m16n8k16,
//            operands rounded to nearest even when staged from f32, or read as stored when A_HALF / B_HALF).
//   A_HALF, B_HALF, OUT_HALF   operands / output stored as f16 (PREC 1 only for the operands).
//   TRANS_A, TRANS_B           as in kernels/gemm.cl: A stored K×M, B stored N×K.
//   BM×BN    the block tile, BK its K tile; WM×WN the warp tile (8 warps of 32 lanes, 256 work-items).
//   VEC      1 when every row and batch start of A, B and C is a multiple of 4 elements: 128-bit (f32) or
//            64-bit (f16) global loads and 64-bit f32 stores.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k8 / m16n8k16"), g = lane >> 2, t = lane & 3:
//   m16n8k8 tf32: A a0 (g, t) a1 (g+8, t) a2 (g, t+4) a3 (g+8, t+4); B b0 (k t, n g) b1 (k t+4, n g).
//   m16n8k16 f16: A r0 (g, 2t..2t+1) r1 (g+8, 2t..) r2 (g, 2t+8..) r3 (g+8, 2t+8..), lower half = lower column;
//                 B r0 (k 2t..2t+1, n g) r1 (k 2t+8..2t+9, n g).
//   C/D (both):   c0 (g, 2t) c1 (g, 2t+1) c2 (g+8, 2t) c3 (g+8, 2t+1).
//
// Each operand's tile is kept in local memory in the orientation of its global storage (the contiguous
// dimension stays contiguous, so global quads land as one local store; FP16's B stored K×N is the exception,
// kept pair-interleaved as described at B_PAIRS), double-buffered, with row padding
// chosen so that the fragment reads of a warp hit 32 distinct banks: rows along K are padded to a row stride of
// 4 mod 32 words (f32) or 20 words (f16), rows along M or N to 8 mod 32 words.

#ifndef TC_PTX
#define TC_PTX 0
#endif
#ifndef PREC
#define PREC 0
#endif
#ifndef TRANS_A
#define TRANS_A 0
#endif
#ifndef TRANS_B
#define TRANS_B 0
#endif
#ifndef BM
#define BM 64
#endif
#ifndef BN
#define BN 64
#endif
#ifndef BK
#define BK 32
#endif
#ifndef WM
#define WM 32
#endif
#ifndef WN
#define WN 16
#endif
#ifndef VEC
#define VEC 0
#endif
#ifndef STAGES
#define STAGES 0
#endif

#define NT 256
#define WARPS_N (BN / WN)
#define MI (WM / 16)
#define NI (WN / 8)
#if (BM / WM) * (BN / WN) != 8
#error "the warp tiles must split the block tile among 8 warps"
#endif
#if PREC == 0 && (A_HALF || B_HALF)
#error "f16 operands multiply with the f16 mma (PREC 1)"
#endif

#if PREC == 0
#define KSTEP 8
#define LT float
#define LT4 float4
#define PAD_K 4
#else
#define KSTEP 16
#define LT ushort
#define LT4 ushort4
#define PAD_K 8
#endif
#define PAD_MN 8

// Tiles in storage orientation: A is BM×BK (rows m) or BK×BM (TRANS_A, rows k); B is BK×BN or BN×BK (TRANS_B).
#if TRANS_A
#define A_ROWS BK
#define A_COLS BM
#define A_LD (BM + PAD_MN)
#define AL(p, m, k) (p)[(k) * A_LD + (m)]
#else
#define A_ROWS BM
#define A_COLS BK
#define A_LD (BK + PAD_K)
#define AL(p, m, k) (p)[(m) * A_LD + (k)]
#endif
#if TRANS_B
#define B_ROWS BN
#define B_COLS BK
#define B_LD (BK + PAD_K)
#define BL(p, k, n) (p)[(n) * B_LD + (k)]
#else
#define B_ROWS BK
#define B_COLS BN
#define B_LD (BN + PAD_MN)
#define BL(p, k, n) (p)[(k) * B_LD + (n)]
#endif
#define A_SIZE (A_ROWS * A_LD)
#define B_SIZE (B_ROWS * B_LD)
#define A_QUADS (A_ROWS * A_COLS / (4 * NT))
#define B_QUADS (B_ROWS * B_COLS / (4 * NT))
#if A_QUADS * 4 * NT != A_ROWS * A_COLS || B_QUADS * 4 * NT != B_ROWS * B_COLS
#error "a tile must be a whole number of quads per work-item"
#endif

// FP16 with B stored K×N: the fragment wants the pairs (k, k+1) of one column n in one 32-bit register, but they
// lie a row apart. With an even number of B quads per work-item, each item stages its quads as pairs of rows
// (2p, 2p+1) at the same columns, and the tile is kept pair-interleaved: the 32-bit word (p, n) holds
// (2p, n) in its low half and (2p+1, n) in its high half, at word p·B_LDW + n. The fragment then reads one
// word per register (B_LDW ≡ 8 mod 32 words, so a warp's reads hit 32 distinct banks) and the staging writes
// four packed words as one 128-bit store.
#if PREC == 1 && !TRANS_B && (B_QUADS % 2 == 0)
#define B_PAIRS 1
#define B_LDW B_LD
#else
#define B_PAIRS 0
#endif

// Loops over fragments and staged quads are unrolled, so that their private arrays are indexed by constants and
// live in registers. The K steps of a tile stay a loop when the mma is emulated: the emulation holds barriers,
// and unrolling them costs CPU compilers much build time.
#define TC_UNROLL _Pragma("unroll")
#if TC_PTX
#define TC_UNROLL_K _Pragma("unroll")
#else
#define TC_UNROLL_K _Pragma("nounroll")
#endif

// The staged quad type of an operand: its storage type.
#define STAGE(h) NCL_CAT(STAGE_, h)
#define STAGE_0 float4
#define STAGE_1 ushort4

// Quad (r, c..c+3) of a rows × cols matrix at p with row stride ld, zeros outside it; one function per storage
// type T (float, ushort).
#define TC_QUAD(name, T)                                                                                     \
    inline T##4 name(__global const T* p, const int ld, const int r, const int c, const int rows,          \
                     const int cols) {                                                                     \
        T##4 v = (T##4)(0);                                                                                \
        if (r < rows) {                                                                                    \
            __global const T* q = p + (size_t)r * ld + c;                                                  \
            if (VEC && c + 3 < cols) return *(__global const T##4*)q;                                      \
            if (c < cols) v.s0 = q[0];                                                                     \
            if (c + 1 < cols) v.s1 = q[1];                                                                 \
            if (c + 2 < cols) v.s2 = q[2];                                                                 \
            if (c + 3 < cols) v.s3 = q[3];                                                                 \
        }                                                                                                  \
        return v;                                                                                          \
    }
TC_QUAD(tc_quad_f32, float)
TC_QUAD(tc_quad_f16, ushort)
#define QUAD(h) NCL_CAT(QUAD_, h)
#define QUAD_0 tc_quad_f32
#define QUAD_1 tc_quad_f16

// f32 to tf32, rounded to nearest with ties away from zero (the rounding of cvt.rna.tf32.f32); infinities and
// NaN pass unchanged. The result is a float whose low 13 mantissa bits are zero.
inline float tc_tf32(const float x) {
#if TC_PTX
    uint u;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
    return as_float(u & 0xffffe000u);
#else
    uint u = as_uint(x);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    return as_float(u);
#endif
}

// Stores a staged quad at element i of a local tile, converted to the tile's type.
#if PREC == 0
inline void tc_put_f32(__local float* p, const int i, const float4 v) {
    *(__local float4*)(p + i) = (float4)(tc_tf32(v.s0), tc_tf32(v.s1), tc_tf32(v.s2), tc_tf32(v.s3));
}
#else
inline void tc_put_f32(__local ushort* p, const int i, const float4 v) {
    vstore_half4_rte(v, 0, (__local half*)(p + i));
}
inline void tc_put_f16(__local ushort* p, const int i, const ushort4 v) { *(__local ushort4*)(p + i) = v; }
#endif
#define PUT(h) NCL_CAT(PUT_, h)
#define PUT_0 tc_put_f32
#define PUT_1 tc_put_f16

#if TC_PTX
#if PREC == 0
#define MMA(c, a, b)                                                                                  \
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
                 "{%8,%9}, {%10,%11,%12,%13};"                                                        \
                 : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])                                     \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),       \
                   "f"(c[1]), "f"(c[2]), "f"(c[3]))
#else
#define MMA(c, a, b)                                                                                 \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
                 "{%8,%9}, {%10,%11,%12,%13};"                                                       \
                 : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])                                    \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),      \
                   "f"(c[1]), "f"(c[2]), "f"(c[3]))
#endif
#else
// The emulated mma, done by the warp together through local memory: every lane writes the A and B values its
// fragment registers hold at the (row, column) the fragment layout assigns them, then each lane computes its
// four C elements from the whole 16×K and K×8 operands, accumulating in f32. A wrong fragment mapping in the
// tile code therefore gives wrong products here too. Every work-item of the group reaches both barriers.
#define SCRATCH_A (16 * KSTEP)
#define SCRATCH_W (16 * KSTEP + KSTEP * 8)
inline float tc_half(const uint bits) {
    const ushort h = (ushort)bits;
    return vload_half(0, (const half*)&h);
}
inline void tc_mma_emu(float* c, const uint* a, const uint* b, __local float* s, const int lane) {
    const int g = lane >> 2, t = lane & 3;
    __local float* sa = s;
    __local float* sb = s + SCRATCH_A;
    barrier(CLK_LOCAL_MEM_FENCE);
#if PREC == 0
    sa[g * 8 + t] = as_float(a[0]);
    sa[(g + 8) * 8 + t] = as_float(a[1]);
    sa[g * 8 + t + 4] = as_float(a[2]);
    sa[(g + 8) * 8 + t + 4] = as_float(a[3]);
    sb[t * 8 + g] = as_float(b[0]);
    sb[(t + 4) * 8 + g] = as_float(b[1]);
#else
    for (int h = 0; h < 2; ++h) {
        sa[g * 16 + 2 * t + h] = tc_half(a[0] >> (16 * h));
        sa[(g + 8) * 16 + 2 * t + h] = tc_half(a[1] >> (16 * h));
        sa[g * 16 + 2 * t + 8 + h] = tc_half(a[2] >> (16 * h));
        sa[(g + 8) * 16 + 2 * t + 8 + h] = tc_half(a[3] >> (16 * h));
        sb[(2 * t + h) * 8 + g] = tc_half(b[0] >> (16 * h));
        sb[(2 * t + 8 + h) * 8 + g] = tc_half(b[1] >> (16 * h));
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = 0; e < 4; ++e) {
        const int row = g + (e >> 1) * 8, col = 2 * t + (e & 1);
        float acc = c[e];
        for (int k = 0; k < KSTEP; ++k) acc = fma(sa[row * KSTEP + k], sb[k * 8 + col], acc);
        c[e] = acc;
    }
}
#define MMA(c, a, b) tc_mma_emu((c), (a), (b), scratch + warp * SCRATCH_W, lane)
#endif

#define PACK(lo, hi) ((uint)(lo) | ((uint)(hi) << 16))

// Four packed words from two staged quads of B (rows 2p and 2p + 1): f16 quads as they are, f32 quads rounded to
// nearest even as the other staging does.
#if B_PAIRS
inline uint4 tc_pair4_f16(const ushort4 lo, const ushort4 hi) {
    return (uint4)(PACK(lo.s0, hi.s0), PACK(lo.s1, hi.s1), PACK(lo.s2, hi.s2), PACK(lo.s3, hi.s3));
}
inline ushort4 tc_h4(const float4 v) {
    ushort4 u;
    vstore_half4_rte(v, 0, (half*)&u);
    return u;
}
inline uint4 tc_pair4_f32(const float4 lo, const float4 hi) { return tc_pair4_f16(tc_h4(lo), tc_h4(hi)); }
#define PAIR4(lo, hi) NCL_CAT(PAIR4_, B_HALF)(lo, hi)
#define PAIR4_0 tc_pair4_f32
#define PAIR4_1 tc_pair4_f16
#endif

// Epilogue of both kernels: c0..c3 of each fragment, bias per row, ReLU (clamps at 0, NaN stays NaN, as
// gemm_epilogue in kernels/gemm.cl), guarded stores; an aligned f32 output stores its pairs as float2.
#if VEC && !OUT_HALF
#define TC_PAIR_STORE(at_, col, v0, v1)                                                                      \
    if ((col) + 1 < N) {                                                                                     \
        *(__global float2*)(C + (at_)) = (float2)((v0), (v1));                                              \
        continue;                                                                                            \
    }
#else
#define TC_PAIR_STORE(at_, col, v0, v1)
#endif
#define TC_EPILOGUE                                                                                          \
    const size_t cbase = (size_t)offC + (size_t)z * sC;                                                      \
    TC_UNROLL for (int i = 0; i < MI; ++i) {                                                                 \
        TC_UNROLL for (int h = 0; h < 2; ++h) {                                                              \
            const int row = m0 + wm0 + i * 16 + g + 8 * h;                                                   \
            if (row >= M) continue;                                                                          \
            const float bv = bias_mode == 1 ? bias[row] : 0.0f;                                              \
            TC_UNROLL for (int j = 0; j < NI; ++j) {                                                         \
                const int col = n0 + wn0 + j * 8 + 2 * t;                                                    \
                float v0 = acc[i][j][2 * h] + bv, v1 = acc[i][j][2 * h + 1] + bv;                            \
                if (relu) {                                                                                  \
                    v0 = v0 < 0.0f ? 0.0f : v0;                                                              \
                    v1 = v1 < 0.0f ? 0.0f : v1;                                                              \
                }                                                                                            \
                const size_t at_ = cbase + (size_t)row * ldc + col;                                          \
                TC_PAIR_STORE(at_, col, v0, v1)                                                              \
                if (col < N) STX(OUT_HALF, v0, C, at_);                                                      \
                if (col + 1 < N) STX(OUT_HALF, v1, C, at_ + 1);                                              \
            }                                                                                                \
        }                                                                                                    \
    }

// The work-item's place, in both kernels: its warp and lane, the lane's group g and thread t in the fragment
// layouts, and the warp's first row and column in the block tile.
#define TC_IDS                                                                                              \
    const int tid = get_local_id(0);                                                                        \
    const int warp = tid >> 5, lane = tid & 31;                                                             \
    const int g = lane >> 2, t = lane & 3;                                                                  \
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;

#if STAGES == 0
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void gemm_tc(const int M, const int N, const int K,
             __global const float* restrict A, const int offA, const int lda, const int sA,
             __global const float* restrict B, const int offB, const int ldb, const int sB,
             __global float* restrict C, const int offC, const int ldc, const int sC,
             __global const float* restrict bias, const int bias_mode, const int relu)
{
    TC_IDS
    const int n0 = get_group_id(0) * BN, m0 = get_group_id(1) * BM;
    const int z = get_group_id(2);
#if A_HALF
    __global const ushort* Ab = (__global const ushort*)A + offA + (size_t)z * sA;
#else
    __global const float* Ab = A + offA + (size_t)z * sA;
#endif
#if B_HALF
    __global const ushort* Bb = (__global const ushort*)B + offB + (size_t)z * sB;
#else
    __global const float* Bb = B + offB + (size_t)z * sB;
#endif

    __local LT4 smem_a[2 * A_SIZE / 4];
#if B_PAIRS
    // 128-bit stores into the pair-interleaved tile: the array must be 16-byte aligned (2·B_SIZE halves).
    __local uint4 smem_b[B_SIZE / 4];
#else
    __local LT4 smem_b[2 * B_SIZE / 4];
#endif
    __local LT* As = (__local LT*)smem_a;
    __local LT* Bs = (__local LT*)smem_b;
#if !TC_PTX
    __local float scratch[8 * SCRATCH_W];
#endif

    STAGE(A_HALF) ra[A_QUADS];
    STAGE(B_HALF) rb[B_QUADS];
    float acc[MI][NI][4];
    TC_UNROLL for (int i = 0; i < MI; ++i)
        TC_UNROLL for (int j = 0; j < NI; ++j)
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    // Quad l of a work-item: element (r, c) of the tile in storage orientation.
#define QRC(l, ncols) const int q_ = tid + (l) * NT, r = q_ / ((ncols) / 4), c = (q_ % ((ncols) / 4)) * 4;
#define LOAD_TILES(k0)                                                                                  \
    {                                                                                                   \
        TC_UNROLL for (int l = 0; l < A_QUADS; ++l) {                                                   \
            QRC(l, A_COLS)                                                                              \
            ra[l] = TRANS_A ? QUAD(A_HALF)(Ab, lda, (k0) + r, m0 + c, K, M)                             \
                            : QUAD(A_HALF)(Ab, lda, m0 + r, (k0) + c, M, K);                            \
        }                                                                                               \
        TC_UNROLL for (int l = 0; l < B_QUADS; ++l) {                                                   \
            BRC(l)                                                                                      \
            rb[l] = TRANS_B ? QUAD(B_HALF)(Bb, ldb, n0 + r, (k0) + c, N, K)                             \
                            : QUAD(B_HALF)(Bb, ldb, (k0) + r, n0 + c, K, N);                            \
        }                                                                                               \
    }
#define STORE_TILES(buf)                                                                                \
    {                                                                                                   \
        TC_UNROLL for (int l = 0; l < A_QUADS; ++l) {                                                   \
            QRC(l, A_COLS)                                                                              \
            PUT(A_HALF)(As + (buf) * A_SIZE, r * A_LD + c, ra[l]);                                      \
        }                                                                                               \
        STORE_B(buf)                                                                                    \
    }

#if B_PAIRS
    // Quads 2h and 2h + 1 of a work-item are rows 2p and 2p + 1 of the same four columns.
#define BRC(l)                                                                                          \
    const int p_ = tid + ((l) >> 1) * NT, r = 2 * (p_ / (B_COLS / 4)) + ((l) & 1),                      \
              c = (p_ % (B_COLS / 4)) * 4;
#define STORE_B(buf)                                                                                    \
    {                                                                                                   \
        TC_UNROLL for (int h = 0; h < B_QUADS / 2; ++h) {                                               \
            BRC(2 * h)                                                                                  \
            __local uint* w = (__local uint*)(Bs + (buf) * B_SIZE) + (r >> 1) * B_LDW + c;              \
            *(__local uint4*)w = PAIR4(rb[2 * h], rb[2 * h + 1]);                                       \
        }                                                                                               \
    }
#else
#define BRC(l) QRC(l, B_COLS)
#define STORE_B(buf)                                                                                    \
    {                                                                                                   \
        TC_UNROLL for (int l = 0; l < B_QUADS; ++l) {                                                   \
            QRC(l, B_COLS)                                                                              \
            PUT(B_HALF)(Bs + (buf) * B_SIZE, r * B_LD + c, rb[l]);                                      \
        }                                                                                               \
    }
#endif

    const int nk = (K + BK - 1) / BK;
    if (nk > 0) {
        LOAD_TILES(0)
        STORE_TILES(0)
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int kt = 0; kt < nk; ++kt) {
        const int cur = kt & 1;
        const bool more = kt + 1 < nk;
        if (more) LOAD_TILES((kt + 1) * BK)
        __local const LT* at = As + cur * A_SIZE;
        __local const LT* bt = Bs + cur * B_SIZE;
        TC_UNROLL_K for (int kk = 0; kk < BK; kk += KSTEP) {
            uint af[MI][4], bf[NI][2];
            TC_UNROLL for (int i = 0; i < MI; ++i) {
                const int r = wm0 + i * 16 + g;
#if PREC == 0
                af[i][0] = as_uint(AL(at, r, kk + t));
                af[i][1] = as_uint(AL(at, r + 8, kk + t));
                af[i][2] = as_uint(AL(at, r, kk + t + 4));
                af[i][3] = as_uint(AL(at, r + 8, kk + t + 4));
#elif TRANS_A
                af[i][0] = PACK(AL(at, r, kk + 2 * t), AL(at, r, kk + 2 * t + 1));
                af[i][1] = PACK(AL(at, r + 8, kk + 2 * t), AL(at, r + 8, kk + 2 * t + 1));
                af[i][2] = PACK(AL(at, r, kk + 2 * t + 8), AL(at, r, kk + 2 * t + 9));
                af[i][3] = PACK(AL(at, r + 8, kk + 2 * t + 8), AL(at, r + 8, kk + 2 * t + 9));
#else
                // Pairs along k are adjacent: one 32-bit read each.
                af[i][0] = *(__local const uint*)&AL(at, r, kk + 2 * t);
                af[i][1] = *(__local const uint*)&AL(at, r + 8, kk + 2 * t);
                af[i][2] = *(__local const uint*)&AL(at, r, kk + 2 * t + 8);
                af[i][3] = *(__local const uint*)&AL(at, r + 8, kk + 2 * t + 8);
#endif
            }
            TC_UNROLL for (int j = 0; j < NI; ++j) {
                const int n = wn0 + j * 8 + g;
#if PREC == 0
                bf[j][0] = as_uint(BL(bt, kk + t, n));
                bf[j][1] = as_uint(BL(bt, kk + t + 4, n));
#elif TRANS_B
                bf[j][0] = *(__local const uint*)&BL(bt, kk + 2 * t, n);
                bf[j][1] = *(__local const uint*)&BL(bt, kk + 2 * t + 8, n);
#elif B_PAIRS
                bf[j][0] = ((__local const uint*)bt)[(kk / 2 + t) * B_LDW + n];
                bf[j][1] = ((__local const uint*)bt)[(kk / 2 + t + 4) * B_LDW + n];
#else
                bf[j][0] = PACK(BL(bt, kk + 2 * t, n), BL(bt, kk + 2 * t + 1, n));
                bf[j][1] = PACK(BL(bt, kk + 2 * t + 8, n), BL(bt, kk + 2 * t + 9, n));
#endif
            }
            TC_UNROLL for (int i = 0; i < MI; ++i)
                TC_UNROLL for (int j = 0; j < NI; ++j) MMA(acc[i][j], af[i], bf[j]);
        }
        if (more) STORE_TILES(cur ^ 1)
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    TC_EPILOGUE
}
#endif // STAGES == 0

// ---------------------------------------------------------------------------------------------------------------
// gemm_tc_pipe (STAGES = 2, 3 or 4): the same product, tiles and fragments, with the operand tiles copied from
// global to local memory by `cp.async` (16 bytes a copy, no registers held, zero-filled past the edges) into
// STAGES buffers, so that the copies of the next STAGES - 1 K tiles are in flight while the warps multiply the
// current one, and the fragments read by `ldmatrix` (four 8×8 matrices of 16-bit elements a lane group per
// instruction; `.trans` where the tile's contiguous dimension is M or N). A TF32 operand whose contiguous
// dimension is M or N has no 16-bit transpose and is read as in gemm_tc; TF32 fragments are rounded as they
// are read (the copies move the f32 bits as stored).
//
// Fragments are double-buffered across the K steps: a warp reads the next step's fragments (at a tile's last
// step, the next tile's first, after that tile's barrier) before it issues the current step's mma instructions,
// so that the tensor cores work while the reads are in flight, also where a K tile is a single step.
//
// Operands are copied as stored: TF32 from f32, FP16 from f16 (A_HALF and B_HALF). Every row and batch start
// must lie on 16 bytes (a multiple of 4 f32 or 8 f16 elements). The tiles are unpadded and swizzled instead:
// the 16-byte chunks of a tile row are permuted by an XOR with a function of the row (SWZ below), so that the
// eight rows an ldmatrix phase reads, and the rows of a TF32 fragment read element by element, fall in distinct
// bank groups; without padding, a 128×128 tile with 64 bytes of K per row takes three buffers in 48 KiB.
//
// With TC_PTX 0 the copies are plain loads and stores, and ldmatrix is emulated by the warp through local
// memory with the lane-to-row addressing of the instruction, so that PoCL checks every address below.
#if STAGES
#if STAGES < 2 || STAGES > 4
#error "STAGES is 2, 3 or 4"
#endif
#if (PREC == 0 && (A_HALF || B_HALF)) || (PREC == 1 && !(A_HALF && B_HALF))
#error "gemm_tc_pipe copies operands as stored: TF32 from f32, FP16 from f16"
#endif
#if PREC == 0
#define CHUNK_E 4
#else
#define CHUNK_E 8
#endif
#define A_CHUNKS (A_ROWS * A_COLS / (CHUNK_E * NT))
#define B_CHUNKS (B_ROWS * B_COLS / (CHUNK_E * NT))
#if A_CHUNKS * CHUNK_E * NT != A_ROWS * A_COLS || B_CHUNKS * CHUNK_E * NT != B_ROWS * B_COLS || A_CHUNKS == 0
#error "a tile must be a whole number of 16-byte copies per work-item"
#endif
#if NI % 2
#error "B fragments are read two n8 tiles at a time"
#endif
#ifndef TC_GROUP_M
#define TC_GROUP_M 8
#endif
// Whether an operand's K dimension is contiguous in its tile (ldmatrix without .trans).
#define A_KC (!TRANS_A)
#define B_KC (TRANS_B)

// The swizzled tiles. A row that runs along K holds BK elements, KROW_R rows to a 128-byte line of the 32 banks,
// KROW_C chunks each: its chunk c is stored at c ^ ((r / KROW_R) % KROW_C), so that 8 consecutive rows at one
// chunk cover the 8 bank groups. A row that runs along M or N holds 128 bytes or more (BM, BN ≥ 32): its chunk
// c is stored at c ^ (r & 7), so that 8 consecutive rows at one chunk do (ldmatrix .trans); for TF32, read
// element by element at rows t and columns g (t = 0..3, g = 0..7, two chunks), at c ^ 2(r & 3).
#if PREC == 0
#define KROW_C (BK / 4)
#else
#define KROW_C (BK / 8)
#endif
#define KROW_R (8 / KROW_C)
#if KROW_C > 8 || KROW_C < 1
#error "a K row of the pipelined tiles holds 16 to 128 bytes"
#endif
#if PREC == 0
#define SW_MN(r) (((r) & 3) << 1)
#else
#define SW_MN(r) ((r) & 7)
#endif
#define SW_K(r) (((r) / KROW_R) % KROW_C)
#if (TRANS_A && A_COLS / CHUNK_E < 8) || (!TRANS_B && B_COLS / CHUNK_E < 8)
#error "a pipelined tile's rows along M or N hold at least 8 chunks of 16 bytes"
#endif
// Element `col` of a row whose chunks are permuted by s.
#define SWZ(col, s) (((((col) / CHUNK_E) ^ (s)) * CHUNK_E) + (col) % CHUNK_E)
#undef A_LD
#undef B_LD
#undef AL
#undef BL
#undef A_SIZE
#undef B_SIZE
#define A_LD A_COLS
#define B_LD B_COLS
#if TRANS_A
#define A_SW(r) SW_MN(r)
#else
#define A_SW(r) SW_K(r)
#endif
#if TRANS_B
#define B_SW(r) SW_K(r)
#else
#define B_SW(r) SW_MN(r)
#endif
#if TRANS_A
#define AL(p, m, k) (p)[(k) * A_LD + SWZ(m, A_SW(k))]
#else
#define AL(p, m, k) (p)[(m) * A_LD + SWZ(k, A_SW(m))]
#endif
#if TRANS_B
#define BL(p, k, n) (p)[(n) * B_LD + SWZ(k, B_SW(n))]
#else
#define BL(p, k, n) (p)[(k) * B_LD + SWZ(n, B_SW(k))]
#endif
#define A_SIZE (A_ROWS * A_COLS)
#define B_SIZE (B_ROWS * B_COLS)

// Copies n (0..CHUNK_E) elements from src to the 16 bytes at dst and zeros the rest.
inline void tc_copy16(__local LT* dst, __global const LT* src, const int n) {
#if TC_PTX
    ncl_cp_async16(dst, src, n * (int)sizeof(LT));
#else
    for (int i = 0; i < CHUNK_E; ++i) dst[i] = i < n ? src[i] : (LT)0;
#endif
}

#if TC_PTX
#define CP_COMMIT() NCL_CP_COMMIT()
#if STAGES == 2
#define CP_WAIT_TILE() NCL_CP_WAIT(0)
#elif STAGES == 3
#define CP_WAIT_TILE() NCL_CP_WAIT(1)
#else
#define CP_WAIT_TILE() NCL_CP_WAIT(2)
#endif
#define CP_WAIT_ALL() asm volatile("cp.async.wait_all;" ::: "memory")
#define LDSM(r, p)                                                                                          \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"                             \
                 : "=r"((r)[0]), "=r"((r)[1]), "=r"((r)[2]), "=r"((r)[3])                                    \
                 : "r"((uint)(size_t)(p))                                                                    \
                 : "memory")
#define LDSM_T(r, p)                                                                                        \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"                       \
                 : "=r"((r)[0]), "=r"((r)[1]), "=r"((r)[2]), "=r"((r)[3])                                    \
                 : "r"((uint)(size_t)(p))                                                                    \
                 : "memory")
#else
#define CP_COMMIT()
#define CP_WAIT_TILE()
#define CP_WAIT_ALL()
// The emulated ldmatrix .x4: lane l names the row (l % 8) of matrix (l / 8) by its address; every lane then
// receives, of each matrix j, the 16-bit elements (g, 2t) and (g, 2t + 1), or with .trans (2t, g) and
// (2t + 1, g), low half first. Addresses travel as byte offsets from the tile base through `sc` (32 ints for the
// warp). Every work-item of the group reaches both barriers.
inline void tc_ldsm_emu(uint* r, __local const LT* p, __local const LT* base, __local int* sc, const int lane,
                        const int trans) {
    barrier(CLK_LOCAL_MEM_FENCE);
    sc[lane] = (int)((__local const uchar*)p - (__local const uchar*)base);
    barrier(CLK_LOCAL_MEM_FENCE);
    __local const ushort* h = (__local const ushort*)base;
    const int g = lane >> 2, t = lane & 3;
    for (int j = 0; j < 4; ++j) {
        if (trans) {
            const ushort lo = h[sc[j * 8 + 2 * t] / 2 + g], hi = h[sc[j * 8 + 2 * t + 1] / 2 + g];
            r[j] = PACK(lo, hi);
        } else {
            const int row = sc[j * 8 + g] / 2;
            r[j] = PACK(h[row + 2 * t], h[row + 2 * t + 1]);
        }
    }
}
#define LDSM(r, p) tc_ldsm_emu((r), (p), tiles_base, ldsm_w, lane, 0)
#define LDSM_T(r, p) tc_ldsm_emu((r), (p), tiles_base, ldsm_w, lane, 1)
#endif

// A TF32 fragment word read as stored, rounded to tf32.
#define TF32W(w) as_uint(tc_tf32(as_float(w)))

// The fragments of K step kk of the warp whose tile starts at (wm0, wn0), from the operand tiles at `at` and
// `bt`, into af and bf. Every work-item of the group calls it together (the emulated ldmatrix holds barriers).
inline void tc_frags(uint af[MI][4], uint bf[NI][2], __local const LT* at, __local const LT* bt, const int kk,
                     const int wm0, const int wn0, const int lane
#if !TC_PTX
                     , __local const LT* tiles_base, __local int* ldsm_w
#endif
) {
    const int g = lane >> 2, t = lane & 3;
    // Lane l's row and 8-element block in the four matrices of an x4 read: the matrix is j = l / 8.
    const int lr = lane & 7, lj0 = (lane >> 3) & 1, lj1 = lane >> 4;
    TC_UNROLL for (int i = 0; i < MI; ++i) {
        const int r0 = wm0 + i * 16;
#if PREC == 1 && A_KC
        // Matrices (rows +0/+8) × (k +0/+8): a0 a1 a2 a3.
        LDSM(af[i], &AL(at, r0 + lr + 8 * lj0, kk + 8 * lj1));
#elif PREC == 1
        // Stored K × M: rows k, transposed.
        LDSM_T(af[i], &AL(at, r0 + 8 * lj0, kk + lr + 8 * lj1));
#elif A_KC
        // TF32: an 8×8 matrix of 16-bit elements is 8 rows of 4 f32; rows +0/+8 × k +0/+4.
        LDSM(af[i], &AL(at, r0 + lr + 8 * lj0, kk + 4 * lj1));
        TC_UNROLL for (int e = 0; e < 4; ++e) af[i][e] = TF32W(af[i][e]);
#else
        af[i][0] = TF32W(as_uint(AL(at, r0 + g, kk + t)));
        af[i][1] = TF32W(as_uint(AL(at, r0 + g + 8, kk + t)));
        af[i][2] = TF32W(as_uint(AL(at, r0 + g, kk + t + 4)));
        af[i][3] = TF32W(as_uint(AL(at, r0 + g + 8, kk + t + 4)));
#endif
    }
    TC_UNROLL for (int j = 0; j < NI; j += 2) {
        const int c0 = wn0 + j * 8;
#if PREC == 1 || B_KC
        uint r4[4];
#endif
#if PREC == 1 && B_KC
        // Stored N × K: matrices (n +0, k +0) (n +0, k +8) (n +8, k +0) (n +8, k +8).
        LDSM(r4, &BL(bt, kk + 8 * lj0, c0 + lr + 8 * lj1));
#elif PREC == 1
        // Stored K × N, transposed: matrices (k +0, n +0) (k +8, n +0) (k +0, n +8) (k +8, n +8).
        LDSM_T(r4, &BL(bt, kk + lr + 8 * lj0, c0 + 8 * lj1));
#elif B_KC
        // TF32 stored N × K: matrices (n +0, k +0) (n +0, k +4) (n +8, k +0) (n +8, k +4).
        LDSM(r4, &BL(bt, kk + 4 * lj0, c0 + lr + 8 * lj1));
        TC_UNROLL for (int e = 0; e < 4; ++e) r4[e] = TF32W(r4[e]);
#endif
#if PREC == 1 || B_KC
        bf[j][0] = r4[0];
        bf[j][1] = r4[1];
        bf[j + 1][0] = r4[2];
        bf[j + 1][1] = r4[3];
#else
        TC_UNROLL for (int h = 0; h < 2; ++h) {
            bf[j + h][0] = TF32W(as_uint(BL(bt, kk + t, c0 + 8 * h + g)));
            bf[j + h][1] = TF32W(as_uint(BL(bt, kk + t + 4, c0 + 8 * h + g)));
        }
#endif
    }
}

__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void gemm_tc_pipe(const int M, const int N, const int K,
                  __global const float* restrict A, const int offA, const int lda, const int sA,
                  __global const float* restrict B, const int offB, const int ldb, const int sB,
                  __global float* restrict C, const int offC, const int ldc, const int sC,
                  __global const float* restrict bias, const int bias_mode, const int relu)
{
    TC_IDS
    // Block tiles in groups of TC_GROUP_M rows, column after column within a group: the work-groups that run
    // at the same time share A's rows and B's columns in the L2 cache (in launch order a wave would sweep
    // every column of B for a few rows of A, and B of a large product does not fit the L2).
    int bx = get_group_id(0), by = get_group_id(1);
    {
        const int nbn = get_num_groups(0), nbm = get_num_groups(1);
        const int pid = by * nbn + bx, span = TC_GROUP_M * nbn;
        const int first = pid / span * TC_GROUP_M, rows = min(nbm - first, TC_GROUP_M);
        by = first + (pid % span) % rows;
        bx = (pid % span) / rows;
    }
    const int n0 = bx * BN, m0 = by * BM;
    const int z = get_group_id(2);
    __global const LT* Ab = (__global const LT*)A + offA + (size_t)z * sA;
    __global const LT* Bb = (__global const LT*)B + offB + (size_t)z * sB;

    // STAGES A tiles, then STAGES B tiles; 16-byte aligned, as are all their rows.
    __local uint4 tiles[STAGES * (A_SIZE + B_SIZE) * sizeof(LT) / 16];
    __local LT* As = (__local LT*)tiles;
    __local LT* Bs = As + STAGES * A_SIZE;
#if !TC_PTX
    __local float scratch[8 * SCRATCH_W];
    __local int ldsm_sc[8 * 32];
    __local const LT* tiles_base = (__local const LT*)tiles;
#endif

    float acc[MI][NI][4];
    TC_UNROLL for (int i = 0; i < MI; ++i)
        TC_UNROLL for (int j = 0; j < NI; ++j)
            TC_UNROLL for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    // Each work-item's copies, fixed for the whole K loop. Copy l of an operand is row r, columns c.. of its
    // tile in storage orientation: `dst` its offset in the tile, `src` its source at K tile 0, `kp` its position
    // along K within the tile (c where K runs along the rows, r where it runs down them), and `in` how many of
    // its elements lie inside the matrix along M or N (where K runs along the rows: all of them or none, by
    // its row).
#define CHUNK_INIT(X, l, ncols, KC, base, ld, r0mn, mn)                                                     \
    {                                                                                                       \
        const int q_ = tid + (l) * NT, r = q_ / ((ncols) / CHUNK_E), c = (q_ % ((ncols) / CHUNK_E)) * CHUNK_E; \
        X##_dst[l] = r * X##_LD + SWZ(c, X##_SW(r));                                                        \
        if (KC) {                                                                                           \
            X##_kp[l] = c;                                                                                  \
            X##_in[l] = (r0mn) + r < (mn) ? CHUNK_E : 0;                                                    \
            X##_src[l] = (base) + (size_t)min((r0mn) + r, (mn) - 1) * (ld) + c;                             \
        } else {                                                                                            \
            X##_kp[l] = r;                                                                                  \
            X##_in[l] = clamp((mn) - ((r0mn) + c), 0, CHUNK_E);                                             \
            X##_src[l] = (base) + (size_t)r * (ld) + min((r0mn) + c, (mn) - 1);                             \
        }                                                                                                   \
    }
    __global const LT* A_src[A_CHUNKS];
    __global const LT* B_src[B_CHUNKS];
    int A_dst[A_CHUNKS], A_kp[A_CHUNKS], A_in[A_CHUNKS], B_dst[B_CHUNKS], B_kp[B_CHUNKS], B_in[B_CHUNKS];
    TC_UNROLL for (int l = 0; l < A_CHUNKS; ++l) CHUNK_INIT(A, l, A_COLS, A_KC, Ab, lda, m0, M)
    TC_UNROLL for (int l = 0; l < B_CHUNKS; ++l) CHUNK_INIT(B, l, B_COLS, B_KC, Bb, ldb, n0, N)
    // The copies of K tile k0 into the buffers at `da` and `db`: the elements inside the matrix, zeros past it.
#define CHUNK_COPY(X, l, KC, ld, k0, dst)                                                                   \
    {                                                                                                       \
        const int n = KC ? (X##_in[l] ? clamp(K - ((k0) + X##_kp[l]), 0, CHUNK_E) : 0)                      \
                         : ((k0) + X##_kp[l] < K ? X##_in[l] : 0);                                          \
        tc_copy16((dst) + X##_dst[l], n > 0 ? X##_src[l] + (KC ? (size_t)(k0) : (size_t)(k0) * (ld)) : Ab, n); \
    }
#define COPY_TILES(k0, da, db)                                                                              \
    {                                                                                                       \
        TC_UNROLL for (int l = 0; l < A_CHUNKS; ++l) CHUNK_COPY(A, l, A_KC, lda, k0, da)                    \
        TC_UNROLL for (int l = 0; l < B_CHUNKS; ++l) CHUNK_COPY(B, l, B_KC, ldb, k0, db)                    \
    }

    const int nk = (K + BK - 1) / BK;
    // The first STAGES - 1 K tiles in flight; one commit group per tile, empty past the end, so that the
    // count of groups still pending says which tile has landed.
    TC_UNROLL for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nk) COPY_TILES(s * BK, As + s * A_SIZE, Bs + s * B_SIZE)
        CP_COMMIT();
    }
#if TC_PTX
#define FRAGS(af, bf, at, bt, kk) tc_frags(af, bf, at, bt, kk, wm0, wn0, lane)
#else
    __local int* ldsm_w = ldsm_sc + warp * 32;
#define FRAGS(af, bf, at, bt, kk) tc_frags(af, bf, at, bt, kk, wm0, wn0, lane, tiles_base, ldsm_w)
#endif
    // Tile 0 landed (of the groups issued, STAGES - 2 may still be pending) and whole for the group; the
    // first fragments.
    CP_WAIT_TILE();
    barrier(CLK_LOCAL_MEM_FENCE);
    uint af[MI][4], bf[NI][2];
    FRAGS(af, bf, As, Bs, 0);
    // The buffer multiplied now (tile kt) and the one the next copies fill (tile kt + STAGES - 1, into the
    // buffer of tile kt - 1, which every warp last read before the barrier at the end of tile kt - 1).
    int rd = 0, wr = STAGES - 1;
    for (int kt = 0; kt < nk; ++kt) {
        if (kt + STAGES - 1 < nk) COPY_TILES((kt + STAGES - 1) * BK, As + wr * A_SIZE, Bs + wr * B_SIZE)
        CP_COMMIT();
        wr = wr + 1 == STAGES ? 0 : wr + 1;
        __local const LT* at = As + rd * A_SIZE;
        __local const LT* bt = Bs + rd * B_SIZE;
        TC_UNROLL_K for (int kk = 0; kk < BK; kk += KSTEP) {
            uint an[MI][4], bn[NI][2];
            // At a tile's last step: tile kt + 1 landed (the groups issued run to tile kt + STAGES - 1, so
            // STAGES - 2 may still be pending), whole for the group, and its first fragments. Past the last tile
            // the buffer holds stale values, read and never multiplied. With two buffers, tile kt + 1's copies
            // were issued at the start of this tile: they get its last step's products to land in too.
#define NEXT_TILE                                                                                           \
    {                                                                                                       \
        CP_WAIT_TILE();                                                                                     \
        rd = rd + 1 == STAGES ? 0 : rd + 1;                                                                 \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                       \
        FRAGS(an, bn, As + rd * A_SIZE, Bs + rd * B_SIZE, 0);                                               \
    }
            if (kk + KSTEP < BK) {
                FRAGS(an, bn, at, bt, kk + KSTEP);
            } else if (STAGES > 2) {
                NEXT_TILE
            }
            TC_UNROLL for (int i = 0; i < MI; ++i)
                TC_UNROLL for (int j = 0; j < NI; ++j) MMA(acc[i][j], af[i], bf[j]);
            if (STAGES == 2 && kk + KSTEP >= BK) NEXT_TILE
            TC_UNROLL for (int i = 0; i < MI; ++i)
                TC_UNROLL for (int e = 0; e < 4; ++e) af[i][e] = an[i][e];
            TC_UNROLL for (int j = 0; j < NI; ++j) {
                bf[j][0] = bn[j][0];
                bf[j][1] = bn[j][1];
            }
        }
    }
    CP_WAIT_ALL();

    TC_EPILOGUE
}
#endif // STAGES
