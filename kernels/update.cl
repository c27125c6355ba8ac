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

__kernel void sgd_step(const int n, const float lr, const float wd, const float mu, const int nesterov,
                       __global float* p, __global const float* g, __global float* v, __global const float* skip) {
    const int i = get_global_id(0);
    if (i >= n) return;
    SKIP_IF_FLAGGED(skip)
    const float pi = p[i];
    float gi = g[i] + wd * pi;
    if (mu != 0.0f) {
        const float vi = mu * v[i] + gi;
        v[i] = vi;
        gi = nesterov ? gi + mu * vi : vi;
    }
    p[i] = pi - lr * gi;
}

__kernel void adam_step(const int n, const float lr, const float b1, const float b2, const float eps,
                        const float wd, const int decoupled, const float bc1, const float bc2,
                        __global float* p, __global const float* g, __global float* m, __global float* v,
                        __global const float* skip) {
    const int i = get_global_id(0);
    if (i >= n) return;
    SKIP_IF_FLAGGED(skip)
    float pi = p[i];
    float gi = g[i];
    if (decoupled) pi -= lr * wd * pi; else gi += wd * pi;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - lr * (mi / bc1) / (sqrt(vi / bc2) + eps);
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
