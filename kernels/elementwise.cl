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

// Same-shape inputs: four elements per work-item, scalar tail. Buffers start aligned and i is a multiple of 4,
// so the float4 views are aligned (one 16-byte access per input instead of four).
__kernel void binary_same(const int n, __global const float* a, __global const float* b, __global float* out) {
    const int i = get_global_id(0) * 4;
    if (i + 3 < n) {
        const float4 x = *(__global const float4*)(a + i);
        const float4 y = *(__global const float4*)(b + i);
        float4 r;
        r.s0 = OP(x.s0, y.s0);
        r.s1 = OP(x.s1, y.s1);
        r.s2 = OP(x.s2, y.s2);
        r.s3 = OP(x.s3, y.s3);
        *(__global float4*)(out + i) = r;
    } else {
        for (int j = i; j < n; ++j) out[j] = OP(a[j], b[j]);
    }
}

#ifndef ALIGN4
#define ALIGN4 0
#endif
// ALIGN4: every outer stride is a multiple of 4, so with VEC = 4 each float4 access is 16-byte aligned.
#if ALIGN4
#define VLOAD4(p) (*(__global const float4*)(p))
#define VSTORE4(v, p) (*(__global float4*)(p) = (v))
#else
#define VLOAD4(p) vload4(0, (p))
#define VSTORE4(v, p) vstore4((v), 0, (p))
#endif
#if A_INNER
#define LOAD_A4(p) VLOAD4(p)
#else
#define LOAD_A4(p) ((float4)(*(p)))
#endif
#if B_INNER
#define LOAD_B4(p) VLOAD4(p)
#else
#define LOAD_B4(p) ((float4)(*(p)))
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
    const float4 u = LOAD_A4(a + ia);
    const float4 v = LOAD_B4(b + ib);
    float4 r;
    r.s0 = OP(u.s0, v.s0);
    r.s1 = OP(u.s1, v.s1);
    r.s2 = OP(u.s2, v.s2);
    r.s3 = OP(u.s3, v.s3);
    VSTORE4(r, out + o);
#else
    out[o] = OP(a[ia], b[ib]);
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
    out[i] = OP(a[ia], b[ib]);
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
        const float4 x = vload4(0, a + i);
        float4 r;
        r.s0 = SOP(x.s0, s);
        r.s1 = SOP(x.s1, s);
        r.s2 = SOP(x.s2, s);
        r.s3 = SOP(x.s3, s);
        vstore4(r, 0, out + i);
    } else {
        for (int j = i; j < n; ++j) out[j] = SOP(a[j], s);
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
