// Dropout with a counter-based generator: the keep decision of element i is a pure function of (seed, i),
// the same SplitMix64 finaliser as the host's `rng::hash`, so a mask is identical on every device and for any
// launch geometry. keep ⇔ uniform(seed, i) ≥ p; kept values are scaled by 1/(1−p).

static inline ulong mix64(ulong seed, ulong counter) {
    ulong z = seed ^ (counter * 0x9E3779B97F4A7C15UL + 0x6A09E667F3BCC909UL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9UL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBUL;
    return z ^ (z >> 31);
}

static inline float uniform01(ulong seed, ulong i) { return (float)(mix64(seed, i) >> 40) * (1.0f / 16777216.0f); }

// out = keep ? x·scale : 0 (x may be the incoming gradient: the backward is the same map). x is read with
// LDX(IN_HALF, …) and out written with STX(OUT_HALF, …) (kernels/prelude.cl), so f16 stays f16.
__kernel void dropout_apply(const int n, const uint seed_lo, const uint seed_hi, const float p, const float scale,
                            __global const float* x, __global float* out) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const ulong seed = ((ulong)seed_hi << 32) | (ulong)seed_lo;
    STX(OUT_HALF, uniform01(seed, (ulong)i) >= p ? LDX(IN_HALF, x, i) * scale : 0.0f, out, i);
}
