// In-place parameter updates of the optimisers. Hyper-parameters travel as arguments (never baked into the
// source), so a new learning rate or decay does not rebuild anything.

__kernel void sgd_step(const int n, const float lr, const float wd, const float mu, const int nesterov,
                       __global float* p, __global const float* g, __global float* v) {
    const int i = get_global_id(0);
    if (i >= n) return;
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
                        __global float* p, __global const float* g, __global float* m, __global float* v) {
    const int i = get_global_id(0);
    if (i >= n) return;
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
                           __global float* b) {
    const int i = get_global_id(0);
    if (i >= n) return;
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
