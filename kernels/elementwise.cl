// Elementwise binary ops with broadcasting. OP(x, y) is defined per build (-D OP=...), on scalars.
// Shapes and strides travel by value as int8 arguments (innermost dimension in .s0), never as buffers.

#ifndef OP
#define OP(x, y) ((x) + (y))
#endif

// Same-shape inputs: four elements per work-item.
__kernel void binary_same(const int n, __global const float* a, __global const float* b, __global float* out) {
    const int i = get_global_id(0) * 4;
    if (i + 3 < n) {
        const float4 x = vload4(0, a + i);
        const float4 y = vload4(0, b + i);
        float4 r;
        r.s0 = OP(x.s0, y.s0);
        r.s1 = OP(x.s1, y.s1);
        r.s2 = OP(x.s2, y.s2);
        r.s3 = OP(x.s3, y.s3);
        vstore4(r, 0, out + i);
    } else {
        for (int j = i; j < n; ++j) out[j] = OP(a[j], b[j]);
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
