// The shared prelude: prepended to every kernel family (kernels/<family>.cl) when its source is assembled, so
// each family's text as built, shown and checksummed is complete. Macros only: a family that uses none of them
// compiles to the same code as without the prelude.

#ifndef GRID_LOOP
#define GRID_LOOP 0
#endif
// The y and z indices of a 3-D kernel. With GRID_LOOP (set when a launch caps the y or z extent at 65535
// groups, as some drivers require) they stride over the grid; otherwise each work-item has one (y, z), which
// CPU OpenCL compilers vectorise far better than a loop.
#if GRID_LOOP
#define YZ_BEGIN(y, d1, z, d0)                                         \
    for (int z = get_global_id(2); z < (d0); z += get_global_size(2)) \
        for (int y = get_global_id(1); y < (d1); y += get_global_size(1)) {
#else
#define YZ_BEGIN(y, d1, z, d0)         \
    const int z = get_global_id(2);    \
    const int y = get_global_id(1);    \
    if (y < (d1) && z < (d0)) {
#endif

// f16 storage. LDX(h, p, i) reads element i of buffer p as a float and STX(h, v, p, i) writes v there; LDX4 and
// STX4 move four elements from element i on. h is a define that expands to 0 or 1 (A_HALF, B_HALF, IN_HALF,
// OUT_HALF, ...): with 1 the buffer holds halves, read with vload_half and written with vstore_half_rte (core
// OpenCL C 1.2, no cl_khr_fp16 needed), so storage is 16-bit while the maths stays f32; with 0 the access is
// the plain float access, so an f32 build compiles to what it would without these macros.
#define NCL_CAT_(a, b) a##b
#define NCL_CAT(a, b) NCL_CAT_(a, b)
#define LDX(h, p, i) NCL_CAT(LDX_, h)(p, i)
#define LDX4(h, p, i) NCL_CAT(LDX4_, h)(p, i)
#define STX(h, v, p, i) NCL_CAT(STX_, h)(v, p, i)
#define STX4(h, v, p, i) NCL_CAT(STX4_, h)(v, p, i)
#define LDX_0(p, i) ((p)[i])
#define LDX_1(p, i) vload_half((i), (__global const half*)(p))
#define LDX4_0(p, i) vload4(0, (p) + (i))
#define LDX4_1(p, i) vload_half4(0, (__global const half*)(p) + (i))
#define STX_0(v, p, i) ((p)[i] = (v))
#define STX_1(v, p, i) vstore_half_rte((v), (i), (__global half*)(p))
#define STX4_0(v, p, i) vstore4((v), 0, (p) + (i))
#define STX4_1(v, p, i) vstore_half4_rte((v), 0, (__global half*)(p) + (i))
// The same for i a multiple of 4 (and the buffer's start aligned): vloada_half4 / vstorea_half4_rte may then
// move the four halves as one 8-byte access, where vload_half4 (2-byte alignment) may take four.
#define LDXA4(h, p, i) NCL_CAT(LDXA4_, h)(p, i)
#define STXA4(h, v, p, i) NCL_CAT(STXA4_, h)(v, p, i)
#define LDXA4_0(p, i) LDX4_0(p, i)
#define LDXA4_1(p, i) vloada_half4((i) >> 2, (__global const half*)(p))
#define STXA4_0(v, p, i) STX4_0(v, p, i)
#define STXA4_1(v, p, i) vstorea_half4_rte((v), (i) >> 2, (__global half*)(p))
#ifndef A_HALF
#define A_HALF 0
#endif
#ifndef B_HALF
#define B_HALF 0
#endif
#ifndef IN_HALF
#define IN_HALF 0
#endif
#ifndef OUT_HALF
#define OUT_HALF 0
#endif

// GROUP_FOLD(v, OP): folds `v` over the work-group with OP (a two-argument macro or function) through a local
// array `sc` of L + 32 floats, with `lid` the local id and L the work-group size (a power of two) in scope;
// every item gets the same result. A kernel that folds declares GROUP_FOLD_VARS once before its first fold.
// Two folds may follow each other without a barrier between them.
//
// Portable form (NCL_SHFL 0): two barriers, where a tree takes log2(L): every item's value goes to sc[lid], the
// first W = min(L, 32) items each fold every W-th value into sc[L + lid], and every item folds those W in the
// same order.
//
// NCL_SHFL 1 (NVIDIA GPUs, whose OpenCL compiler takes inline PTX; set by the host only for work-groups of a
// multiple of 32 items, so that every warp is whole and the build holds no second form): each warp folds its 32 values with `shfl.sync.bfly` (five exchanges, no local memory; every lane gets the
// same bits, as each exchange combines the same two values in either order), its first lane writes the warp's
// value, and after one barrier every warp folds the L / 32 warp values the same way, each lane starting from
// value (lane mod L / 32). Consecutive folds alternate between sc[0..32) and sc[32..64) for the warp values
// (GROUP_FOLD_VARS holds which), so that a fast warp's next fold never overwrites values a slow warp still reads.
#ifndef NCL_SHFL
#define NCL_SHFL 0
#endif
#define NCL_ADD(a, b) ((a) + (b))
#define GROUP_FOLD_TREE(v, OP)                                             \
    {                                                                      \
        const int w_ = L < 32 ? L : 32;                                    \
        sc[lid] = (v);                                                     \
        barrier(CLK_LOCAL_MEM_FENCE);                                      \
        if (lid < w_) {                                                    \
            float a_ = sc[lid];                                            \
            for (int i_ = lid + w_; i_ < L; i_ += w_) a_ = OP(a_, sc[i_]); \
            sc[L + lid] = a_;                                              \
        }                                                                  \
        barrier(CLK_LOCAL_MEM_FENCE);                                      \
        v = sc[L];                                                         \
        for (int i_ = 1; i_ < w_; ++i_) v = OP(v, sc[L + i_]);             \
    }
#if NCL_SHFL
inline float ncl_shfl_xor(const float v, const int m) {
    float r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(m));
    return r;
}
#define GROUP_FOLD_VARS int ncl_fs_ = 0;
#define GROUP_FOLD(v, OP)                                                  \
    {                                                                      \
        for (int m_ = 16; m_ > 0; m_ >>= 1) v = OP(v, ncl_shfl_xor(v, m_)); \
        const int nw_ = L >> 5;                                            \
        if (nw_ > 1) {                                                     \
            __local float* ws_ = sc + ncl_fs_;                             \
            ncl_fs_ ^= 32;                                                 \
            if ((lid & 31) == 0) ws_[lid >> 5] = v;                        \
            barrier(CLK_LOCAL_MEM_FENCE);                                  \
            v = ws_[lid & (nw_ - 1)];                                      \
            for (int m_ = nw_ >> 1; m_ > 0; m_ >>= 1)                      \
                v = OP(v, ncl_shfl_xor(v, m_));                            \
        }                                                                  \
    }
#else
#define GROUP_FOLD_VARS /* the local-memory fold keeps no state */
#define GROUP_FOLD(v, OP) GROUP_FOLD_TREE(v, OP)
#endif

// Asynchronous copies from global to local memory (PTX's `cp.async`, NVIDIA GPUs of compute capability 8.0 and
// later), declared only in builds whose host sets NCL_ASYNC or TC_PTX. ncl_cp_async16 copies the first `bytes`
// (0 to 16) of src to the 16 bytes at dst and zeros the rest (both 16-byte aligned; through L2 only);
// ncl_cp_async4 the same for 4 bytes. No registers hold the data: the work-item goes on while it is in flight.
// NCL_CP_COMMIT() closes the group of the copies issued since the last one; NCL_CP_WAIT(n) (a literal) waits
// until at most n of the work-item's groups are in flight. A barrier after the wait makes the copies of every
// item visible to the group.
#if NCL_ASYNC || TC_PTX
static inline void ncl_cp_async16(__local void* dst, __global const void* src, const int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :
                 : "r"((uint)(size_t)dst), "l"((ulong)(size_t)src), "r"(bytes)
                 : "memory");
}
static inline void ncl_cp_async4(__local void* dst, __global const void* src, const int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                 :
                 : "r"((uint)(size_t)dst), "l"((ulong)(size_t)src), "r"(bytes)
                 : "memory");
}
#define NCL_CP_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
#define NCL_CP_WAIT(n) asm volatile("cp.async.wait_group " #n ";" ::: "memory")
#endif

// ncl_atomic_add(p, v): *p += v atomically for a global float, in any order (OpenCL 1.2 has no float atomics).
// NCL_RED 0 (the default): a compare-and-swap loop on the bits. NCL_RED 1 or more (set by the host on NVIDIA
// GPUs only, whose OpenCL compiler takes inline PTX): PTX's `red.global.add.f32`, done in the L2 cache without
// a round trip.
#ifndef NCL_RED
#define NCL_RED 0
#endif
static inline void ncl_atomic_add(__global float* p, const float v) {
#if NCL_RED
    asm volatile("red.global.add.f32 [%0], %1;" : : "l"((ulong)(size_t)p), "f"(v) : "memory");
#else
    volatile __global unsigned int* pu = (volatile __global unsigned int*)p;
    unsigned int old = *pu;
    for (;;) {
        const unsigned int seen = atomic_cmpxchg(pu, old, as_uint(as_float(old) + v));
        if (seen == old) break;
        old = seen;
    }
#endif
}
