// Unary ops and activations, forward and backward. F(v) and DF(v, g) are defined per build on scalars and may
// use the op's parameters p0 and p1, which are kernel arguments (a new slope or bound never builds a program).
// The backward recomputes what it needs from the forward input x; a NaN input gives a NaN gradient.
// f16 storage (kernels/prelude.cl): IN_HALF for x, B_HALF for the gradient g, OUT_HALF for out.

#ifndef F
#define F(v) (v)
#endif
#ifndef DF
#define DF(v, g) (g)
#endif

// BEGIN op vocabulary helpers: the functions the templates of src/contract/vocab.rs call. The same block stands
// in unary.cl and fused.cl (a test keeps the two equal).
// An f16 output is rounded to 11 significant bits, far coarser than the error of the native exponential and
// reciprocal (a few f32 ulps), which GPUs compute several times faster: the logistic forms use them then.
#if OUT_HALF
#define LOGISTIC(t) native_recip(1.0f + native_exp(t))
#else
#define LOGISTIC(t) (1.0f / (1.0f + exp(t)))
#endif
static inline float sigm(float v) { return LOGISTIC(-v); }
// max, min and clamp that keep NaN (fmax/fmin would drop it)
static inline float fmaxn(float a, float b) { return (isnan(a) || isnan(b)) ? a + b : fmax(a, b); }
static inline float fminn(float a, float b) { return (isnan(a) || isnan(b)) ? a + b : fmin(a, b); }
static inline float clampn(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }
static inline float sq(float v) { return v * v; }
static inline float relun(float v) { return v < 0.0f ? 0.0f : v; }
static inline float lrelu(float v, float s) { return v > 0.0f ? v : s * v; }
static inline float elu_f(float v, float a) { return v > 0.0f ? v : a * expm1(v); }
static inline float hsig(float v) { return clampn(0.2f * v + 0.5f, 0.0f, 1.0f); }
static inline float softplus_f(float v) { return fmax(v, 0.0f) + log1p(exp(-fabs(v))); }
// x·gate(x) forms take their limits at ±inf (0 and x; slopes 0 and 1) instead of inf·0 = NaN.
#define XLIM(v) ((v) > 0.0f ? (v) : 0.0f)
#define GLIM(v, g) ((v) > 0.0f ? (g) : 0.0f)
#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f
// 0.5·v·(1 + tanh(u)) as v·σ(2u), with u = K(v + C·v³): one exp and one division instead of a tanh, and no
// cancellation where tanh(u) nears −1. Its slope σ(2u) + 2v·σ(1 − σ)·K(1 + 3Cv²) drops the second term once
// σ(1 − σ) is 0 (large |v|, where K(1 + 3Cv²) may overflow).
static inline float gelu_s(float v) { return LOGISTIC(-2.0f * GELU_K * (v + GELU_C * v * v * v)); }
static inline float gelu_t(float v) { return isinf(v) ? XLIM(v) : v * gelu_s(v); }
static inline float gelu_t_d(float v) {
    const float s = gelu_s(v);
    const float q = s * (1.0f - s);
    return q == 0.0f ? s : s + 2.0f * v * q * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
}
static inline float gelu_e(float v) { return isinf(v) ? XLIM(v) : 0.5f * v * (1.0f + erf(v * 0.7071067811865476f)); }
static inline float gelu_e_d(float v) {
    return 0.5f * (1.0f + erf(v * 0.7071067811865476f)) + v * exp(-0.5f * v * v) * 0.3989422804014327f;
}
static inline float silu_f(float v) { return isinf(v) ? XLIM(v) : v * sigm(v); }
static inline float hswish(float v) { return isinf(v) ? XLIM(v) : v * hsig(v); }
// END op vocabulary helpers

#ifndef UN8
#define UN8 0
#endif
// UN8 (every buffer f16): eight elements per work-item, so each access moves 16 bytes as in f32 builds; the
// other builds take four.
#if UN8
#define UN_W 8
#define UN_LD(h, p, i) vloada_half8((i) >> 3, (__global const half*)(p))
#define UN_ST(h, v, p, i) vstorea_half8_rte((v), (i) >> 3, (__global half*)(p))
#define UN_T float8
#else
#define UN_W 4
#define UN_LD(h, p, i) LDXA4(h, p, i)
#define UN_ST(h, v, p, i) STXA4(h, v, p, i)
#define UN_T float4
#endif

__kernel void unary_fwd(const int n, const float p0, const float p1, __global const float* x, __global float* out) {
    const int i = get_global_id(0) * UN_W;
    if (i + UN_W - 1 < n) {
        const UN_T v = UN_LD(IN_HALF, x, i);
        UN_T r;
        r.s0 = F(v.s0);
        r.s1 = F(v.s1);
        r.s2 = F(v.s2);
        r.s3 = F(v.s3);
#if UN8
        r.s4 = F(v.s4);
        r.s5 = F(v.s5);
        r.s6 = F(v.s6);
        r.s7 = F(v.s7);
#endif
        UN_ST(OUT_HALF, r, out, i);
    } else {
        for (int j = i; j < n; ++j) STX(OUT_HALF, F(LDX(IN_HALF, x, j)), out, j);
    }
}

#define DFN(v, g) (isnan(v) ? (v) : DF(v, g))

__kernel void unary_bwd(const int n, const float p0, const float p1, __global const float* x, __global const float* g,
                        __global float* out) {
    const int i = get_global_id(0) * UN_W;
    if (i + UN_W - 1 < n) {
        const UN_T v = UN_LD(IN_HALF, x, i);
        const UN_T d = UN_LD(B_HALF, g, i);
        UN_T r;
        r.s0 = DFN(v.s0, d.s0);
        r.s1 = DFN(v.s1, d.s1);
        r.s2 = DFN(v.s2, d.s2);
        r.s3 = DFN(v.s3, d.s3);
#if UN8
        r.s4 = DFN(v.s4, d.s4);
        r.s5 = DFN(v.s5, d.s5);
        r.s6 = DFN(v.s6, d.s6);
        r.s7 = DFN(v.s7, d.s7);
#endif
        UN_ST(OUT_HALF, r, out, i);
    } else {
        for (int j = i; j < n; ++j) STX(OUT_HALF, DFN(LDX(IN_HALF, x, j), LDX(B_HALF, g, j)), out, j);
    }
}
