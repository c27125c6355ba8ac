// Elementwise binary ops with broadcasting. OP(x, y) is defined per build (-D OP=...), on scalars.
// Shapes and strides travel by value (ints or int8 with the innermost dimension in .s0), never as buffers.

// YZ_BEGIN and GRID_LOOP come from kernels/prelude.cl.

// max and min that keep NaN, as the op vocabulary's `maximum` and `minimum` templates call them.
static inline float fmaxn(float a, float b) { return (isnan(a) || isnan(b)) ? a + b : fmax(a, b); }
static inline float fminn(float a, float b) { return (isnan(a) || isnan(b)) ? a + b : fmin(a, b); }

#ifndef OP
#define OP(x, y) ((x) + (y))
#endif
#ifndef A_INNER
#define A_INNER 1
#endif
#ifndef B_INNER
#define B_INNER 1
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef SWAP
#define SWAP 0
#endif

// An aligned float4 read of an f32 buffer, or four halves through LDX4 (A_HALF, B_HALF, OUT_HALF: kernels/prelude.cl).
#define ALD4_0(p, i) (*(__global const float4*)((p) + (i)))
#define ALD4_1(p, i) LDXA4_1(p, i)
#define ALD4(h, p, i) NCL_CAT(ALD4_, h)(p, i)
#define AST4_0(v, p, i) (*(__global float4*)((p) + (i)) = (v))
#define AST4_1(v, p, i) STXA4_1(v, p, i)
#define AST4(h, v, p, i) NCL_CAT(AST4_, h)(v, p, i)

// Same-shape inputs: four elements per work-item, scalar tail. Buffers start aligned and i is a multiple of 4,
// so the float4 views are aligned (one 16-byte access per input instead of four).
__kernel void binary_same(const int n, __global const float* a, __global const float* b, __global float* out) {
    const int i = get_global_id(0) * 4;
    if (i + 3 < n) {
        const float4 x = ALD4(A_HALF, a, i);
        const float4 y = ALD4(B_HALF, b, i);
        float4 r;
        r.s0 = OP(x.s0, y.s0);
        r.s1 = OP(x.s1, y.s1);
        r.s2 = OP(x.s2, y.s2);
        r.s3 = OP(x.s3, y.s3);
        AST4(OUT_HALF, r, out, i);
    } else {
        for (int j = i; j < n; ++j) STX(OUT_HALF, OP(LDX(A_HALF, a, j), LDX(B_HALF, b, j)), out, j);
    }
}

#ifndef ALIGN4
#define ALIGN4 0
#endif
// ALIGN4: every outer stride is a multiple of 4, so with VEC = 4 each float4 access is 16-byte aligned.
#if ALIGN4
#define VLOAD4(h, p, i) ALD4(h, p, i)
#define VSTORE4(v, p, i) AST4(OUT_HALF, v, p, i)
#else
#define VLOAD4(h, p, i) LDX4(h, p, i)
#define VSTORE4(v, p, i) STX4(OUT_HALF, v, p, i)
#endif
#if A_INNER
#define LOAD_A4(p, i) VLOAD4(A_HALF, p, i)
#else
#define LOAD_A4(p, i) ((float4)(LDX(A_HALF, p, i)))
#endif
#if B_INNER
#define LOAD_B4(p, i) VLOAD4(B_HALF, p, i)
#else
#define LOAD_B4(p, i) ((float4)(LDX(B_HALF, p, i)))
#endif

// Broadcasting over at most three collapsed dimensions (d0 outermost) without any division: a 3-D range of
// (d2 / VEC, d1, d0). The innermost stride of each input is 1 (A_INNER/B_INNER = 1) or 0 (repeated); with
// VEC = 4 (d2 a multiple of 4) each work-item loads a float4 or one broadcast value per input.
__kernel void binary_3d(const int d0, const int d1, const int d2, const int sa0, const int sa1, const int sb0,
                        const int sb1, __global const float* a, __global const float* b, __global float* out) {
    const int x = get_global_id(0) * VEC;
    if (x >= d2) return;
    YZ_BEGIN(y, d1, z, d0)
    const int o = (z * d1 + y) * d2 + x;
    const int ia = z * sa0 + y * sa1 + x * A_INNER;
    const int ib = z * sb0 + y * sb1 + x * B_INNER;
#if VEC == 4
    const float4 u = LOAD_A4(a, ia);
    const float4 v = LOAD_B4(b, ib);
    float4 r;
    r.s0 = OP(u.s0, v.s0);
    r.s1 = OP(u.s1, v.s1);
    r.s2 = OP(u.s2, v.s2);
    r.s3 = OP(u.s3, v.s3);
    VSTORE4(r, out, o);
#else
    STX(OUT_HALF, OP(LDX(A_HALF, a, ia), LDX(B_HALF, b, ib)), out, o);
#endif
    }
}

#define BCAST_STEP(k)                              \
    if (k < rank) {                                \
        const int q = rem / shape.s##k;            \
        const int c = rem - q * shape.s##k;        \
        ia += c * sa.s##k;                         \
        ib += c * sb.s##k;                         \
        rem = q;                                   \
    }

// General broadcasting over up to 8 (collapsed) dimensions; a stride of 0 repeats an input along a dimension.
__kernel void binary_bcast(const int n, const int rank, const int8 shape, const int8 sa, const int8 sb,
                           __global const float* a, __global const float* b, __global float* out) {
    const int i = get_global_id(0);
    if (i >= n) return;
    int rem = i, ia = 0, ib = 0;
    BCAST_STEP(0) BCAST_STEP(1) BCAST_STEP(2) BCAST_STEP(3)
    BCAST_STEP(4) BCAST_STEP(5) BCAST_STEP(6) BCAST_STEP(7)
    STX(OUT_HALF, OP(LDX(A_HALF, a, ia), LDX(B_HALF, b, ib)), out, i);
}

#if SWAP
#define SOP(x, s) OP(s, x)
#else
#define SOP(x, s) OP(x, s)
#endif

// A tensor and a scalar argument (OP(x, s), or OP(s, x) with SWAP): the scalar is an argument, so a new value
// never compiles a new program.
__kernel void binary_scalar(const int n, const float s, __global const float* a, __global float* out) {
    const int i = get_global_id(0) * 4;
    if (i + 3 < n) {
        const float4 x = LDXA4(A_HALF, a, i);
        float4 r;
        r.s0 = SOP(x.s0, s);
        r.s1 = SOP(x.s1, s);
        r.s2 = SOP(x.s2, s);
        r.s3 = SOP(x.s3, s);
        STXA4(OUT_HALF, r, out, i);
    } else {
        for (int j = i; j < n; ++j) STX(OUT_HALF, SOP(LDX(A_HALF, a, j), s), out, j);
    }
}

// A plain copy of n floats, float4 per work-item (the bandwidth yardstick of `netcl bench copy_large`). Buffers
// start aligned, so the float4 view is aligned; the tail of n % 4 elements is copied by the first items.
__kernel void copy_f32(const int n, __global const float* x, __global float* y) {
    const int n4 = n >> 2;
    __global const float4* x4 = (__global const float4*)x;
    __global float4* y4 = (__global float4*)y;
    for (int i = get_global_id(0); i < n4; i += get_global_size(0)) y4[i] = x4[i];
    const int t = (n4 << 2) + get_global_id(0);
    if (t < n) y[t] = x[t];
}

// A plain copy of n halves (f16 storage), eight per work-item as one 16-byte float4 (the f16 twin of copy_f32,
// moving bits without converting them); the tail of n % 8 elements is copied by the first items as 16-bit
// words.
__kernel void copy_f16(const int n, __global const float* x, __global float* y) {
    const int n8 = n >> 3;
    __global const float4* x4 = (__global const float4*)x;
    __global float4* y4 = (__global float4*)y;
    for (int i = get_global_id(0); i < n8; i += get_global_size(0)) y4[i] = x4[i];
    const int t = (n8 << 3) + get_global_id(0);
    if (t < n) ((__global ushort*)y)[t] = ((__global const ushort*)x)[t];
}
