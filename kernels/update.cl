// In-place parameter updates of the optimisers. Hyper-parameters travel as arguments (never baked into the
// source), so a new learning rate or decay does not rebuild anything.
//
// Mixed precision (GradScaler): with FLAGGED set, a step reads the found-inf flag skip[2] of the scaler's state
// buffer and leaves the parameter and its state untouched when it is set, so a step with an overflowed gradient
// is skipped on the device without the host reading anything. Without FLAGGED `skip` is never read.

#ifndef FLAGGED
#define FLAGGED 0
#endif
#if FLAGGED
#define SKIP_IF_FLAGGED(skip) if ((skip)[2] != 0.0f) return;
#else
#define SKIP_IF_FLAGGED(skip)
#endif

// Element i of one SGD step.
static inline void sgd_at(const int i, const float lr, const float wd, const float mu, const int nesterov,
                          __global float* p, __global const float* g, __global float* v) {
    const float pi = p[i];
    float gi = g[i] + wd * pi;
    if (mu != 0.0f) {
        const float vi = mu * v[i] + gi;
        v[i] = vi;
        gi = nesterov ? gi + mu * vi : vi;
    }
    p[i] = pi - lr * gi;
}

__kernel void sgd_step(const int n, const float lr, const float wd, const float mu, const int nesterov,
                       __global float* p, __global const float* g, __global float* v, __global const float* skip) {
    const int i = get_global_id(0);
    if (i >= n) return;
    SKIP_IF_FLAGGED(skip)
    sgd_at(i, lr, wd, mu, nesterov, p, g, v);
}

// Element i of one Adam step.
static inline void adam_at(const int i, const float lr, const float b1, const float b2, const float eps,
                           const float wd, const int decoupled, const float bc1, const float bc2,
                           __global float* p, __global const float* g, __global float* m, __global float* v) {
    float pi = p[i];
    float gi = g[i];
    if (decoupled) pi -= lr * wd * pi; else gi += wd * pi;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - lr * (mi / bc1) / (sqrt(vi / bc2) + eps);
}

__kernel void adam_step(const int n, const float lr, const float b1, const float b2, const float eps,
                        const float wd, const int decoupled, const float bc1, const float bc2,
                        __global float* p, __global const float* g, __global float* m, __global float* v,
                        __global const float* skip) {
    const int i = get_global_id(0);
    if (i >= n) return;
    SKIP_IF_FLAGGED(skip)
    adam_at(i, lr, b1, b2, eps, wd, decoupled, bc1, bc2, p, g, m, v);
}

__kernel void rmsprop_step(const int n, const float lr, const float alpha, const float eps, const float wd,
                           const float mu, __global float* p, __global const float* g, __global float* s,
                           __global float* b, __global const float* skip) {
    const int i = get_global_id(0);
    if (i >= n) return;
    SKIP_IF_FLAGGED(skip)
    const float pi = p[i];
    const float gi = g[i] + wd * pi;
    const float si = alpha * s[i] + (1.0f - alpha) * gi * gi;
    s[i] = si;
    const float step = gi / (sqrt(si) + eps);
    if (mu != 0.0f) {
        const float bi = mu * b[i] + lr * step;
        b[i] = bi;
        p[i] = pi - bi;
    } else {
        p[i] = pi - lr * step;
    }
}

__kernel void ema_step(const int n, const float d, __global float* shadow, __global const float* p) {
    const int i = get_global_id(0);
    if (i >= n) return;
    shadow[i] = d * shadow[i] + (1.0f - d) * p[i];
}

__kernel void scale_inplace(const int n, const float s, __global float* x) {
    const int i = get_global_id(0);
    if (i >= n) return;
    x[i] *= s;
}

// GradScaler's state buffer: [scale, good steps since the last change, found-inf flag, 1/scale].

// Starts an unscale: clears the flag and computes 1/scale (one work-item).
__kernel void amp_begin(__global float* state) {
    if (get_global_id(0) != 0) return;
    state[2] = 0.0f;
    state[3] = 1.0f / state[0];
}

// Multiplies a gradient by 1/scale in place and raises the flag where a value is not finite (every writer
// writes the same 1, so the race is harmless). An f16 gradient (G_HALF) is read and written as halves.
#ifndef G_HALF
#define G_HALF 0
#endif
__kernel void amp_unscale(const int n, __global float* g, __global float* state) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const float v = LDX(G_HALF, g, i) * state[3];
    if (!isfinite(v)) state[2] = 1.0f;
    STX(G_HALF, v, g, i);
}

// out = x · scale (the scaled loss), with x and out of n elements.
__kernel void amp_scale(const int n, __global const float* x, __global const float* state, __global float* out) {
    const int i = get_global_id(0);
    if (i >= n) return;
    STX(OUT_HALF, LDX(IN_HALF, x, i) * state[0], out, i);
}

// After a step: an overflow backs the scale off and restarts the count; `interval` good steps in a row grow
// it (one work-item).
__kernel void amp_update(const float growth, const float backoff, const int interval, __global float* state) {
    if (get_global_id(0) != 0) return;
    if (state[2] != 0.0f) {
        state[0] *= backoff;
        state[1] = 0.0f;
    } else {
        state[1] += 1.0f;
        if (state[1] >= (float)interval) {
            state[0] *= growth;
            state[1] = 0.0f;
        }
    }
}

// ------------------------------------------------------------------------------------- multi-tensor steps
// One launch updates up to eight parameters: `ends` holds their cumulative sizes (unused slots repeat the
// total), work-item i finds its tensor k (the first with i < ends[k]) and its index within it, and the slot's
// pointers are picked by k. A network's many small parameters (biases, BatchNorm's γ and β) then cost one launch
// per eight instead of one each.

// The tensor k of item i and i's index j in it (i < ends.s7).
static inline int mt_find(const int8 ends, const int i, int* j) {
    const int e[8] = {ends.s0, ends.s1, ends.s2, ends.s3, ends.s4, ends.s5, ends.s6, ends.s7};
    int k = 0, start = 0;
    while (k < 7 && i >= e[k]) {
        start = e[k];
        ++k;
    }
    *j = i - start;
    return k;
}

#define MT_PICK(k, a) \
    ((k) == 0 ? a##0 : (k) == 1 ? a##1 : (k) == 2 ? a##2 : (k) == 3 ? a##3 : \
     (k) == 4 ? a##4 : (k) == 5 ? a##5 : (k) == 6 ? a##6 : a##7)

__kernel void sgd_multi(const int8 ends, const float lr, const float wd, const float mu, const int nesterov,
                        __global float* p0, __global const float* g0, __global float* v0,
                        __global float* p1, __global const float* g1, __global float* v1,
                        __global float* p2, __global const float* g2, __global float* v2,
                        __global float* p3, __global const float* g3, __global float* v3,
                        __global float* p4, __global const float* g4, __global float* v4,
                        __global float* p5, __global const float* g5, __global float* v5,
                        __global float* p6, __global const float* g6, __global float* v6,
                        __global float* p7, __global const float* g7, __global float* v7,
                        __global const float* skip) {
    const int i = get_global_id(0);
    if (i >= ends.s7) return;
    SKIP_IF_FLAGGED(skip)
    int j;
    const int k = mt_find(ends, i, &j);
    sgd_at(j, lr, wd, mu, nesterov, MT_PICK(k, p), MT_PICK(k, g), MT_PICK(k, v));
}

__kernel void adam_multi(const int8 ends, const float lr, const float b1, const float b2, const float eps,
                         const float wd, const int decoupled, const float bc1, const float bc2,
                         __global float* p0, __global const float* g0, __global float* m0, __global float* v0,
                         __global float* p1, __global const float* g1, __global float* m1, __global float* v1,
                         __global float* p2, __global const float* g2, __global float* m2, __global float* v2,
                         __global float* p3, __global const float* g3, __global float* m3, __global float* v3,
                         __global float* p4, __global const float* g4, __global float* m4, __global float* v4,
                         __global float* p5, __global const float* g5, __global float* m5, __global float* v5,
                         __global float* p6, __global const float* g6, __global float* m6, __global float* v6,
                         __global float* p7, __global const float* g7, __global float* m7, __global float* v7,
                         __global const float* skip) {
    const int i = get_global_id(0);
    if (i >= ends.s7) return;
    SKIP_IF_FLAGGED(skip)
    int j;
    const int k = mt_find(ends, i, &j);
    adam_at(j, lr, b1, b2, eps, wd, decoupled, bc1, bc2, MT_PICK(k, p), MT_PICK(k, g), MT_PICK(k, m),
            MT_PICK(k, v));
}
