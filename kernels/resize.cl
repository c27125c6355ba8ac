// Nearest and bilinear upsampling of N×C×H×W planes, forward (one work-item per output) and backward (a
// gather: one work-item per input element over the few outputs that read it). BILINEAR and ALIGN are build
// defines. Nearest: src = ⌊o·in/out⌋. Bilinear: src = o·(in−1)/(out−1) with ALIGN (corners), else
// max(0, (o+½)·in/out − ½); it reads rows ⌊src⌋ and min(⌊src⌋+1, in−1) with weights 1−f and f.

// YZ_BEGIN, GRID_LOOP and the f16 storage switches come from kernels/prelude.cl: the source (x or g) is read
// with LDX(IN_HALF, …) and the destination (y or gx) written with STX(OUT_HALF, …), the maths in f32.

#ifndef BILINEAR
#define BILINEAR 0
#endif
#ifndef ALIGN
#define ALIGN 0
#endif

static inline float src_coord(int o, int in, int out) {
#if ALIGN
    return out > 1 ? (float)o * (float)(in - 1) / (float)(out - 1) : 0.0f;
#else
    return fmax(0.0f, ((float)o + 0.5f) * (float)in / (float)out - 0.5f);
#endif
}

// The weight with which output o reads input i along one axis.
static inline float axis_weight(int o, int i, int in, int out) {
#if BILINEAR
    const float s = src_coord(o, in, out);
    const int i0 = min((int)floor(s), in - 1);
    const int i1 = min(i0 + 1, in - 1);
    const float f = s - (float)i0;
    return (i0 == i ? 1.0f - f : 0.0f) + (i1 == i ? f : 0.0f);
#else
    return (o * in) / out == i ? 1.0f : 0.0f;
#endif
}

__kernel void upsample_fwd(const int P, const int H, const int W, const int OH, const int OW, __global const float* x,
                           __global float* y) {
    const int ow = get_global_id(0);
    if (ow >= OW) return;
    YZ_BEGIN(oh, OH, p, P)
    const int pl = p * H * W;
#define PX(i) LDX(IN_HALF, x, pl + (i))
#if BILINEAR
    const float sh = src_coord(oh, H, OH), sw = src_coord(ow, W, OW);
    const int h0 = min((int)floor(sh), H - 1), w0 = min((int)floor(sw), W - 1);
    const int h1 = min(h0 + 1, H - 1), w1 = min(w0 + 1, W - 1);
    const float fh = sh - (float)h0, fw = sw - (float)w0;
    const float top = PX(h0 * W + w0) * (1.0f - fw) + PX(h0 * W + w1) * fw;
    const float bot = PX(h1 * W + w0) * (1.0f - fw) + PX(h1 * W + w1) * fw;
    STX(OUT_HALF, top * (1.0f - fh) + bot * fh, y, (p * OH + oh) * OW + ow);
#else
    STX(OUT_HALF, PX(((oh * H) / OH) * W + (ow * W) / OW), y, (p * OH + oh) * OW + ow);
#endif
#undef PX
    }
}

// Output indices that may read input i: a window around i·out/in, widened by 2 on each side.
#define RANGE(i, in, out, lo, hi)                               \
    const int lo = max(0, ((i - 1) * out) / in - 2);            \
    const int hi = min(out - 1, ((i + 2) * out) / in + 2);

__kernel void upsample_bwd(const int P, const int H, const int W, const int OH, const int OW, __global const float* g,
                           __global float* gx) {
    const int w = get_global_id(0);
    if (w >= W) return;
    YZ_BEGIN(h, H, p, P)
    RANGE(h, H, OH, oh0, oh1)
    RANGE(w, W, OW, ow0, ow1)
    float acc = 0.0f;
    for (int oh = oh0; oh <= oh1; ++oh) {
        const float a = axis_weight(oh, h, H, OH);
        if (a == 0.0f) continue;
        for (int ow = ow0; ow <= ow1; ++ow) {
            const float b = axis_weight(ow, w, W, OW);
            if (b != 0.0f) acc += a * b * LDX(IN_HALF, g, (p * OH + oh) * OW + ow);
        }
    }
    STX(OUT_HALF, acc, gx, (p * H + h) * W + w);
    }
}
