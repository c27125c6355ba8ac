// 2-D pooling over planes of N×C×H×W (P = N·C planes), any kernel, stride and padding. One work-item per
// output element in the forward; the backward is a gather (one work-item per input element summing the
// outputs whose window covers it), so no atomics are needed. Max pooling stores the index h·W + w of the
// first maximum in scan order (a NaN wins) for its backward.

// YZ_BEGIN, GRID_LOOP and the f16 storage switches come from kernels/prelude.cl: the input (x, or the gradient
// g) is read with LDX(IN_HALF, …) and the output (y, gx) written with STX(OUT_HALF, …), the maths in f32.

// Output rows whose window covers input row h: oh·s − p ≤ h ≤ oh·s − p + k − 1.
#define COVER(h, k, s, p, O, lo, hi)                      \
    const int lo = max(0, (h + p - k + s) / s);           \
    const int hi = min(O - 1, (h + p) / s);

__kernel void maxpool_fwd(const int P, const int H, const int W, const int OH, const int OW, const int kh, const int kw,
                          const int sh, const int sw, const int ph, const int pw, __global const float* x,
                          __global float* y, __global int* idx) {
    const int ow = get_global_id(0);
    if (ow >= OW) return;
    YZ_BEGIN(oh, OH, p, P)
    const int plane = p * H * W;
    float best = -INFINITY;
    int bi = -1;
    for (int i = 0; i < kh; ++i) {
        const int h = oh * sh - ph + i;
        if (h < 0 || h >= H) continue;
        for (int j = 0; j < kw; ++j) {
            const int w = ow * sw - pw + j;
            if (w < 0 || w >= W) continue;
            const float v = LDX(IN_HALF, x, plane + h * W + w);
            if (bi < 0 || v > best || (isnan(v) && !isnan(best))) {
                best = v;
                bi = h * W + w;
            }
        }
    }
    const int o = (p * OH + oh) * OW + ow;
    STX(OUT_HALF, best, y, o);
    idx[o] = bi;
    }
}

__kernel void maxpool_bwd(const int P, const int H, const int W, const int OH, const int OW, const int kh, const int kw,
                          const int sh, const int sw, const int ph, const int pw, __global const float* g,
                          __global const int* idx, __global float* gx) {
    const int w = get_global_id(0);
    if (w >= W) return;
    YZ_BEGIN(h, H, p, P)
    COVER(h, kh, sh, ph, OH, oh0, oh1)
    COVER(w, kw, sw, pw, OW, ow0, ow1)
    const int me = h * W + w;
    float acc = 0.0f;
    for (int oh = oh0; oh <= oh1; ++oh)
        for (int ow = ow0; ow <= ow1; ++ow) {
            const int o = (p * OH + oh) * OW + ow;
            if (idx[o] == me) acc += LDX(IN_HALF, g, o);
        }
    STX(OUT_HALF, acc, gx, (p * H + h) * W + w);
    }
}

// The divisor of output (oh, ow): the whole window, or only its part inside the input.
static inline float avg_div(int oh, int ow, int H, int W, int kh, int kw, int sh, int sw, int ph, int pw, int incl) {
    if (incl) return (float)(kh * kw);
    const int h0 = max(0, oh * sh - ph), h1 = min(H, oh * sh - ph + kh);
    const int w0 = max(0, ow * sw - pw), w1 = min(W, ow * sw - pw + kw);
    return (float)((h1 - h0) * (w1 - w0));
}

__kernel void avgpool_fwd(const int P, const int H, const int W, const int OH, const int OW, const int kh, const int kw,
                          const int sh, const int sw, const int ph, const int pw, const int incl,
                          __global const float* x, __global float* y) {
    const int ow = get_global_id(0);
    if (ow >= OW) return;
    YZ_BEGIN(oh, OH, p, P)
    const int plane = p * H * W;
    float s = 0.0f;
    for (int i = 0; i < kh; ++i) {
        const int h = oh * sh - ph + i;
        if (h < 0 || h >= H) continue;
        for (int j = 0; j < kw; ++j) {
            const int w = ow * sw - pw + j;
            if (w >= 0 && w < W) s += LDX(IN_HALF, x, plane + h * W + w);
        }
    }
    STX(OUT_HALF, s / avg_div(oh, ow, H, W, kh, kw, sh, sw, ph, pw, incl), y, (p * OH + oh) * OW + ow);
    }
}

__kernel void avgpool_bwd(const int P, const int H, const int W, const int OH, const int OW, const int kh, const int kw,
                          const int sh, const int sw, const int ph, const int pw, const int incl,
                          __global const float* g, __global float* gx) {
    const int w = get_global_id(0);
    if (w >= W) return;
    YZ_BEGIN(h, H, p, P)
    COVER(h, kh, sh, ph, OH, oh0, oh1)
    COVER(w, kw, sw, pw, OW, ow0, ow1)
    float acc = 0.0f;
    for (int oh = oh0; oh <= oh1; ++oh)
        for (int ow = ow0; ow <= ow1; ++ow)
            acc += LDX(IN_HALF, g, (p * OH + oh) * OW + ow) / avg_div(oh, ow, H, W, kh, kw, sh, sw, ph, pw, incl);
    STX(OUT_HALF, acc, gx, (p * H + h) * W + w);
    }
}

// Global average pooling's backward: every element of plane p gets g[p] / (H·W).
__kernel void gap_bwd(const int n, const int HW, const float inv, __global const float* g, __global float* gx) {
    const int i = get_global_id(0);
    if (i >= n) return;
    STX(OUT_HALF, LDX(IN_HALF, g, i / HW) * inv, gx, i);
}
