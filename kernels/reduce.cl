// Sum reductions. Two families, chosen by the autotuner per device and size:
//  - sum_wg: a grid-strided loop per work-item, then a tree in local memory (GPUs);
//  - sum_chunk: one contiguous chunk per work-item with float8 loads and no barriers (CPU OpenCL).
// Both write one partial per group or work-item; sum_serial folds the partials.

__kernel void sum_wg(const int n, __global const float* x, __global float* partial, __local float* scratch) {
    const int lid = get_local_id(0);
    const int L = get_local_size(0);
    const int stride = get_global_size(0);
    const int gid = get_global_id(0);
    const int n4 = n >> 2;
    float4 acc4 = (float4)(0.0f);
    for (int i = gid; i < n4; i += stride) acc4 += vload4(i, x);
    float acc = (acc4.s0 + acc4.s1) + (acc4.s2 + acc4.s3);
    const int t = (n4 << 2) + gid;
    if (t < n) acc += x[t];
    scratch[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = L >> 1; s > 0; s >>= 1) {
        if (lid < s) scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) partial[get_group_id(0)] = scratch[0];
}

__kernel void sum_chunk(const int n, const int chunk, __global const float* x, __global float* partial) {
    const int g = get_global_id(0);
    const int start = g * chunk;
    const int end = min(n, start + chunk);
    float8 a = (float8)(0.0f);
    int i = start;
    for (; i + 8 <= end; i += 8) a += vload8(0, x + i);
    float s = ((a.s0 + a.s1) + (a.s2 + a.s3)) + ((a.s4 + a.s5) + (a.s6 + a.s7));
    for (; i < end; ++i) s += x[i];
    partial[g] = s;
}

__kernel void sum_serial(const int n, __global const float* x, __global float* out) {
    if (get_global_id(0) != 0) return;
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += x[i];
    out[0] = s;
}
