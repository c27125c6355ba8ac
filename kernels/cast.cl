// Conversions between storage dtypes on the device. FROM and TO name the dtypes (0 f32, 1 i32, 2 f16). f16 is
// read with vload_half and written with vstore_half_rte (round to nearest even; above 65504 gives infinity),
// both core OpenCL C 1.2, so no cl_khr_fp16 is needed. To i32 the value is truncated towards zero and saturated,
// NaN giving 0 (as Rust's `as i32`).

#ifndef FROM
#define FROM 0
#endif
#ifndef TO
#define TO 2
#endif

#if FROM == 0
#define CAST_LOAD(p, i) ((p)[i])
#elif FROM == 1
#define CAST_LOAD(p, i) ((float)((__global const int*)(p))[i])
#else
#define CAST_LOAD(p, i) vload_half((i), (__global const half*)(p))
#endif

#if TO == 0
#define CAST_STORE(v, p, i) ((p)[i] = (v))
#elif TO == 1
#define CAST_STORE(v, p, i) (((__global int*)(p))[i] = convert_int_sat_rtz(v))
#else
#define CAST_STORE(v, p, i) vstore_half_rte((v), (i), (__global half*)(p))
#endif

// One element per work-item, over a grid that strides when it is smaller than n.
__kernel void cast(const int n, __global const float* x, __global float* y) {
    for (int i = get_global_id(0); i < n; i += get_global_size(0)) CAST_STORE(CAST_LOAD(x, i), y, i);
}
