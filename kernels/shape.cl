// Data movement: permute, block copies (narrow, cat, split), index_select, one_hot and pad2d (zero or
// reflect) with its gather backward. Shapes travel by value; 3-D ranges avoid divisions where they can.

// YZ_BEGIN, GRID_LOOP and the f16 storage switches come from kernels/prelude.cl: permute, the block copies,
// index_select and pad2d (and its backward) read their float source with LDX(IN_HALF, …) and write with
// STX(OUT_HALF, …), so f16 moves as f16; one_hot writes with STX(OUT_HALF, …) and topk reads and writes its
// values so (f16 widens to f32 exactly, so ranks are those of the stored values).

// y[i] = x[Σ c_k·istride_k] where (c_k) is i decomposed over the output shape (innermost in .s0).
__kernel void permute(const int n, const int rank, const int8 oshape, const int8 istride, __global const float* x,
                      __global float* y) {
    const int i = get_global_id(0);
    if (i >= n) return;
    int rem = i, off = 0;
    for (int k = 0; k < 8; ++k) {
        if (k < rank) {
            const int sz = ((const int*)&oshape)[k];
            const int q = rem / sz;
            off += (rem - q * sz) * ((const int*)&istride)[k];
            rem = q;
        }
    }
    STX(OUT_HALF, LDX(IN_HALF, x, off), y, i);
}

// y[o, doff + a, i] (axis extent dA) = x[o, soff + a, i] (axis extent sA) for a < len; range (I, len, O).
__kernel void block_copy(const int O, const int len, const int I, const int sA, const int soff, const int dA,
                         const int doff, __global const float* x, __global float* y) {
    const int i = get_global_id(0);
    if (i >= I) return;
    YZ_BEGIN(a, len, o, O)
    STX(OUT_HALF, LDX(IN_HALF, x, (o * sA + soff + a) * I + i), y, (o * dA + doff + a) * I + i);
    }
}

// y[o, k, i] = x[o, idx[k], i]; range (I, K, O). Indices were checked on the host.
__kernel void index_select(const int O, const int K, const int A, const int I, __global const float* x,
                           __global const int* idx, __global float* y) {
    const int i = get_global_id(0);
    if (i >= I) return;
    YZ_BEGIN(k, K, o, O)
    STX(OUT_HALF, LDX(IN_HALF, x, (o * A + idx[k]) * I + i), y, (o * K + k) * I + i);
    }
}

// y[n, c] = labels[n] == c; range (C, N).
__kernel void one_hot(const int N, const int C, __global const int* labels, __global float* y) {
    const int c = get_global_id(0);
    if (c >= C) return;
    for (int n = get_global_id(1); n < N; n += get_global_size(1))
        STX(OUT_HALF, labels[n] == c ? 1.0f : 0.0f, y, n * C + c);
}

// The source row of padded coordinate u (= output − pad): -1 for zero padding outside, else reflected.
static inline int pad_src(int u, int H, int reflect) {
    if (u >= 0 && u < H) return u;
    if (!reflect) return -1;
    return u < 0 ? -u : 2 * (H - 1) - u;
}

__kernel void pad2d(const int P, const int H, const int W, const int OH, const int OW, const int pt, const int pl,
                    const int reflect, __global const float* x, __global float* y) {
    const int ow = get_global_id(0);
    if (ow >= OW) return;
    YZ_BEGIN(oh, OH, p, P)
    const int h = pad_src(oh - pt, H, reflect);
    const int w = pad_src(ow - pl, W, reflect);
    STX(OUT_HALF, (h < 0 || w < 0) ? 0.0f : LDX(IN_HALF, x, (p * H + h) * W + w), y, (p * OH + oh) * OW + ow);
    }
}

// Gather: input (h, w) sums the output positions that read it (at most 3 candidates per axis under reflect).
__kernel void pad2d_bwd(const int P, const int H, const int W, const int OH, const int OW, const int pt, const int pl,
                        const int reflect, __global const float* g, __global float* gx) {
    const int w = get_global_id(0);
    if (w >= W) return;
    YZ_BEGIN(h, H, p, P)
    const int ch[3] = {h, -h, 2 * (H - 1) - h};
    const int cw[3] = {w, -w, 2 * (W - 1) - w};
    float acc = 0.0f;
    for (int a = 0; a < 3; ++a) {
        const int oh = ch[a] + pt;
        if (oh < 0 || oh >= OH || pad_src(ch[a], H, reflect) != h) continue;
        if ((a >= 1 && ch[a] == ch[0]) || (a == 2 && ch[2] == ch[1])) continue;
        for (int b = 0; b < 3; ++b) {
            const int ow = cw[b] + pl;
            if (ow < 0 || ow >= OW || pad_src(cw[b], W, reflect) != w) continue;
            if ((b >= 1 && cw[b] == cw[0]) || (b == 2 && cw[2] == cw[1])) continue;
            acc += LDX(IN_HALF, g, (p * OH + oh) * OW + ow);
        }
    }
    STX(OUT_HALF, acc, gx, (p * H + h) * W + w);
    }
}

// Whether (a, ia) ranks before (b, ib): larger first (LARGEST) or smaller first, a NaN ranking as the
// largest value, ties broken by the lower index.
static inline int ranks_before(float a, int ia, float b, int ib, int largest) {
    const int na = isnan(a), nb = isnan(b);
    if (na || nb) {
        if (na && nb) return ia < ib;
        return largest ? na : nb;
    }
    if (a == b) return ia < ib;
    return largest ? a > b : a < b;
}

// The first k of each lane along R of [O, R, I] in rank order: pass j picks the best element ranking after
// pick j−1, so no scratch memory is needed (O(k·R) per lane). One work-item per (o, i).
__kernel void topk(const int O, const int R, const int I, const int k, const int largest, __global const float* x,
                   __global float* vals, __global int* idx) {
    const int t = get_global_id(0);
    if (t >= O * I) return;
    const int o = t / I;
    const int i = t - o * I;
    // The lane's first element (an element index: with IN_HALF the buffer holds halves).
    const int p0 = o * R * I + i;
    float pv = 0.0f;
    int pi = -1;
    for (int j = 0; j < k; ++j) {
        int bi = -1;
        float bv = 0.0f;
        for (int r = 0; r < R; ++r) {
            const float v = LDX(IN_HALF, x, p0 + r * I);
            if (pi >= 0 && !ranks_before(pv, pi, v, r, largest)) continue;
            if (bi < 0 || ranks_before(v, r, bv, bi, largest)) {
                bv = v;
                bi = r;
            }
        }
        STX(OUT_HALF, bv, vals, (o * k + j) * I + i);
        idx[(o * k + j) * I + i] = bi;
        pv = bv;
        pi = bi;
    }
}
