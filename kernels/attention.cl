// Scaled dot-product attention over [BH, S, HD] (the contiguous [B, H, S, D] of q, k and v), streamed over keys
// with an online softmax: no S×S score matrix is ever stored. Forward writes the output and the row
// log-sum-exp `lse`; the backward recomputes every probability as exp(s·scale − lse).
//
// Two layouts of the same arithmetic, chosen by the tuner (a third, register-blocked, is in attention_block.cl):
//   *_tile (GPUs): one work-group of BQ·TPR items owns BQ rows; TPR items share a row, each holding every
//     TPR-th column of its accumulators in registers. The other operand streams through local memory in tiles
//     of BK rows (rows padded to HD + 1 floats so that items reading different rows hit different banks).
//   *_rows (CPU OpenCL): one work-item owns RQ rows with private accumulators and no barriers, blocks of KB
//     keys at a time (one rescale of the accumulators per block), which CPU compilers vectorise across items.
// Decode: one query per (b, h) against the first L of C cached positions, split into NC chunks whose partial
// (max, sum, accumulator) a combine pass merges.
//
// Defines: HD (head dimension, ≤ 256), BQ, BK, TPR (tile), RQ, KB (rows).

#ifndef HD
#define HD 64
#endif
#ifndef BQ
#define BQ 16
#endif
#ifndef BK
#define BK 32
#endif
#ifndef TPR
#define TPR 8
#endif
#ifndef RQ
#define RQ 1
#endif
#ifndef KB
#define KB 8
#endif

#define DPT ((HD + TPR - 1) / TPR)
#define NPT (BK / TPR)
#define LD (HD + 1)
#define LS (BK + 1)

// Loads rows [r0, r0 + NR) of the [S, HD] matrix `src` into local `dst` (row stride LD); rows past S are zeros.
#define LOAD_TILE(dst, src, r0, NR)                                                    \
    for (int e_ = lid; e_ < (NR) * HD; e_ += BQ * TPR) {                               \
        const int rr_ = e_ / HD;                                                       \
        const int dd_ = e_ - rr_ * HD;                                                 \
        (dst)[rr_ * LD + dd_] = ((r0) + rr_ < S) ? (src)[(size_t)((r0) + rr_) * HD + dd_] : 0.0f; \
    }

__kernel void attn_fwd_tile(const int S, const int causal, const float scale, __global const float* q,
                            __global const float* k, __global const float* v, __global float* o,
                            __global float* lse, __local float* qs, __local float* kv, __local float* ss) {
    const int lid = get_local_id(0);
    const int r = lid / TPR;
    const int c = lid - r * TPR;
    const int nqb = (S + BQ - 1) / BQ;
    const int bh = get_group_id(0) / nqb;
    const int q0 = (get_group_id(0) - bh * nqb) * BQ;
    const int qi = q0 + r;
    __global const float* qb = q + (size_t)bh * S * HD;
    __global const float* kb = k + (size_t)bh * S * HD;
    __global const float* vb = v + (size_t)bh * S * HD;
    LOAD_TILE(qs, qb, q0, BQ)
    float acc[DPT];
    for (int i = 0; i < DPT; ++i) acc[i] = 0.0f;
    float m = -INFINITY;
    float l = 0.0f;
    const int kend = causal ? min(S, q0 + BQ) : S;
    for (int k0 = 0; k0 < kend; k0 += BK) {
        barrier(CLK_LOCAL_MEM_FENCE);
        LOAD_TILE(kv, kb, k0, BK)
        barrier(CLK_LOCAL_MEM_FENCE);
        float sc[NPT];
        for (int n = 0; n < NPT; ++n) sc[n] = 0.0f;
        for (int dd = 0; dd < HD; ++dd) {
            const float qv = qs[r * LD + dd];
            for (int n = 0; n < NPT; ++n) sc[n] += qv * kv[(c + n * TPR) * LD + dd];
        }
        for (int n = 0; n < NPT; ++n) {
            const int j = c + n * TPR;
            const int kj = k0 + j;
            ss[r * LS + j] = (kj < S && (!causal || kj <= qi)) ? sc[n] * scale : -INFINITY;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        LOAD_TILE(kv, vb, k0, BK)
        float mn = m;
        for (int j = 0; j < BK; ++j) mn = fmax(mn, ss[r * LS + j]);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int n = 0; n < NPT; ++n) {
            const int j = c + n * TPR;
            const float s = ss[r * LS + j];
            ss[r * LS + j] = s == -INFINITY ? 0.0f : exp(s - mn);
        }
        const float corr = mn == -INFINITY ? 1.0f : exp(m - mn);
        m = mn;
        barrier(CLK_LOCAL_MEM_FENCE);
        l *= corr;
        for (int i = 0; i < DPT; ++i) acc[i] *= corr;
        for (int j = 0; j < BK; ++j) {
            const float p = ss[r * LS + j];
            l += p;
            for (int i = 0; i < DPT; ++i) {
                const int dd = c + i * TPR;
                if (dd < HD) acc[i] += p * kv[j * LD + dd];
            }
        }
    }
    if (qi < S) {
        const float il = l > 0.0f ? 1.0f / l : 0.0f;
        __global float* orow = o + ((size_t)bh * S + qi) * HD;
        for (int i = 0; i < DPT; ++i) {
            const int dd = c + i * TPR;
            if (dd < HD) orow[dd] = acc[i] * il;
        }
        if (c == 0) lse[(size_t)bh * S + qi] = l > 0.0f ? m + log(l) : -INFINITY;
    }
}

__kernel void attn_fwd_rows(const int BH, const int S, const int causal, const float scale,
                            __global const float* q, __global const float* k, __global const float* v,
                            __global float* o, __global float* lse) {
    const int nqb = (S + RQ - 1) / RQ;
    const int gid = get_global_id(0);
    if (gid >= BH * nqb) return;
    const int bh = gid / nqb;
    const int q0 = (gid - bh * nqb) * RQ;
    __global const float* kb = k + (size_t)bh * S * HD;
    __global const float* vb = v + (size_t)bh * S * HD;
    float qr[RQ][HD];
    float acc[RQ][HD];
    float m[RQ];
    float l[RQ];
    for (int r = 0; r < RQ; ++r) {
        const int qi = min(q0 + r, S - 1);
        __global const float* qp = q + ((size_t)bh * S + qi) * HD;
        for (int dd = 0; dd < HD; ++dd) {
            qr[r][dd] = qp[dd] * scale;
            acc[r][dd] = 0.0f;
        }
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    const int kend = causal ? min(S, q0 + RQ) : S;
    for (int k0 = 0; k0 < kend; k0 += KB) {
        const int nk = min(KB, kend - k0);
        float s[RQ][KB];
        for (int r = 0; r < RQ; ++r)
            for (int j = 0; j < KB; ++j) s[r][j] = 0.0f;
        for (int j = 0; j < nk; ++j) {
            __global const float* kp = kb + (size_t)(k0 + j) * HD;
            for (int dd = 0; dd < HD; ++dd) {
                const float kd = kp[dd];
                for (int r = 0; r < RQ; ++r) s[r][j] += qr[r][dd] * kd;
            }
        }
        float p[RQ][KB];
        for (int r = 0; r < RQ; ++r) {
            float mn = m[r];
            for (int j = 0; j < nk; ++j) {
                if (causal && k0 + j > q0 + r) s[r][j] = -INFINITY;
                mn = fmax(mn, s[r][j]);
            }
            const float corr = mn == -INFINITY ? 1.0f : exp(m[r] - mn);
            m[r] = mn;
            float ps = 0.0f;
            for (int j = 0; j < KB; ++j) {
                p[r][j] = (j < nk && s[r][j] != -INFINITY) ? exp(s[r][j] - mn) : 0.0f;
                ps += p[r][j];
            }
            l[r] = l[r] * corr + ps;
            for (int dd = 0; dd < HD; ++dd) acc[r][dd] *= corr;
        }
        for (int j = 0; j < nk; ++j) {
            __global const float* vp = vb + (size_t)(k0 + j) * HD;
            for (int dd = 0; dd < HD; ++dd) {
                const float vd = vp[dd];
                for (int r = 0; r < RQ; ++r) acc[r][dd] += p[r][j] * vd;
            }
        }
    }
    for (int r = 0; r < RQ; ++r) {
        const int qi = q0 + r;
        if (qi >= S) break;
        const float il = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        __global float* op = o + ((size_t)bh * S + qi) * HD;
        for (int dd = 0; dd < HD; ++dd) op[dd] = acc[r][dd] * il;
        lse[(size_t)bh * S + qi] = l[r] > 0.0f ? m[r] + log(l[r]) : -INFINITY;
    }
}

// delta[row] = Σ_d dO[row, d]·O[row, d], the softmax Jacobian's row term of the backward.
__kernel void attn_delta(const int N, __global const float* o, __global const float* g, __global float* delta) {
    const int row = get_global_id(0);
    if (row >= N) return;
    __global const float* op = o + (size_t)row * HD;
    __global const float* gp = g + (size_t)row * HD;
    float s = 0.0f;
    for (int dd = 0; dd < HD; ++dd) s += op[dd] * gp[dd];
    delta[row] = s;
}

// dQ: a work-group owns BQ query rows and streams key tiles; ds = p·(dO·v − delta); dq = scale·Σ ds·k.
__kernel void attn_dq_tile(const int S, const int causal, const float scale, __global const float* q,
                           __global const float* k, __global const float* v, __global const float* g,
                           __global const float* lse, __global const float* delta, __global float* dq,
                           __local float* qs, __local float* gs, __local float* ks, __local float* vs,
                           __local float* ss) {
    const int lid = get_local_id(0);
    const int r = lid / TPR;
    const int c = lid - r * TPR;
    const int nqb = (S + BQ - 1) / BQ;
    const int bh = get_group_id(0) / nqb;
    const int q0 = (get_group_id(0) - bh * nqb) * BQ;
    const int qi = q0 + r;
    const size_t base = (size_t)bh * S * HD;
    LOAD_TILE(qs, q + base, q0, BQ)
    LOAD_TILE(gs, g + base, q0, BQ)
    const float lr = qi < S ? lse[(size_t)bh * S + qi] : 0.0f;
    const float dr = qi < S ? delta[(size_t)bh * S + qi] : 0.0f;
    float acc[DPT];
    for (int i = 0; i < DPT; ++i) acc[i] = 0.0f;
    const int kend = causal ? min(S, q0 + BQ) : S;
    for (int k0 = 0; k0 < kend; k0 += BK) {
        barrier(CLK_LOCAL_MEM_FENCE);
        LOAD_TILE(ks, k + base, k0, BK)
        LOAD_TILE(vs, v + base, k0, BK)
        barrier(CLK_LOCAL_MEM_FENCE);
        float sc[NPT];
        float dp[NPT];
        for (int n = 0; n < NPT; ++n) {
            sc[n] = 0.0f;
            dp[n] = 0.0f;
        }
        for (int dd = 0; dd < HD; ++dd) {
            const float qv = qs[r * LD + dd];
            const float gv = gs[r * LD + dd];
            for (int n = 0; n < NPT; ++n) {
                const int j = c + n * TPR;
                sc[n] += qv * ks[j * LD + dd];
                dp[n] += gv * vs[j * LD + dd];
            }
        }
        for (int n = 0; n < NPT; ++n) {
            const int j = c + n * TPR;
            const int kj = k0 + j;
            const bool ok = qi < S && kj < S && (!causal || kj <= qi);
            const float p = ok ? exp(sc[n] * scale - lr) : 0.0f;
            ss[r * LS + j] = p * (dp[n] - dr);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int j = 0; j < BK; ++j) {
            const float ds = ss[r * LS + j];
            for (int i = 0; i < DPT; ++i) {
                const int dd = c + i * TPR;
                if (dd < HD) acc[i] += ds * ks[j * LD + dd];
            }
        }
    }
    if (qi < S) {
        __global float* out = dq + base + (size_t)qi * HD;
        for (int i = 0; i < DPT; ++i) {
            const int dd = c + i * TPR;
            if (dd < HD) out[dd] = acc[i] * scale;
        }
    }
}

// dK, dV: a work-group owns BQ key rows and streams query tiles of BK rows; dv = Σ p·dO, dk = scale·Σ ds·q.
__kernel void attn_dkv_tile(const int S, const int causal, const float scale, __global const float* q,
                            __global const float* k, __global const float* v, __global const float* g,
                            __global const float* lse, __global const float* delta, __global float* dk,
                            __global float* dv, __local float* ks, __local float* vs, __local float* qs,
                            __local float* gs, __local float* ps, __local float* ds) {
    const int lid = get_local_id(0);
    const int r = lid / TPR;
    const int c = lid - r * TPR;
    const int nkb = (S + BQ - 1) / BQ;
    const int bh = get_group_id(0) / nkb;
    const int j0 = (get_group_id(0) - bh * nkb) * BQ;
    const int kj = j0 + r;
    const size_t base = (size_t)bh * S * HD;
    __global const float* lb = lse + (size_t)bh * S;
    __global const float* db = delta + (size_t)bh * S;
    LOAD_TILE(ks, k + base, j0, BQ)
    LOAD_TILE(vs, v + base, j0, BQ)
    float ak[DPT];
    float av[DPT];
    for (int i = 0; i < DPT; ++i) {
        ak[i] = 0.0f;
        av[i] = 0.0f;
    }
    const int istart = causal ? (j0 / BK) * BK : 0;
    for (int i0 = istart; i0 < S; i0 += BK) {
        barrier(CLK_LOCAL_MEM_FENCE);
        LOAD_TILE(qs, q + base, i0, BK)
        LOAD_TILE(gs, g + base, i0, BK)
        barrier(CLK_LOCAL_MEM_FENCE);
        float sc[NPT];
        float dp[NPT];
        for (int n = 0; n < NPT; ++n) {
            sc[n] = 0.0f;
            dp[n] = 0.0f;
        }
        for (int dd = 0; dd < HD; ++dd) {
            const float kv = ks[r * LD + dd];
            const float vv = vs[r * LD + dd];
            for (int n = 0; n < NPT; ++n) {
                const int i = c + n * TPR;
                sc[n] += kv * qs[i * LD + dd];
                dp[n] += vv * gs[i * LD + dd];
            }
        }
        for (int n = 0; n < NPT; ++n) {
            const int i = c + n * TPR;
            const int qi = i0 + i;
            const bool ok = qi < S && kj < S && (!causal || qi >= kj);
            const float p = ok ? exp(sc[n] * scale - lb[qi]) : 0.0f;
            ps[r * LS + i] = p;
            ds[r * LS + i] = ok ? p * (dp[n] - db[qi]) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = 0; i < BK; ++i) {
            const float p = ps[r * LS + i];
            const float d = ds[r * LS + i];
            for (int t = 0; t < DPT; ++t) {
                const int dd = c + t * TPR;
                if (dd < HD) {
                    av[t] += p * gs[i * LD + dd];
                    ak[t] += d * qs[i * LD + dd];
                }
            }
        }
    }
    if (kj < S) {
        __global float* ok_ = dk + base + (size_t)kj * HD;
        __global float* ov_ = dv + base + (size_t)kj * HD;
        for (int t = 0; t < DPT; ++t) {
            const int dd = c + t * TPR;
            if (dd < HD) {
                ok_[dd] = ak[t] * scale;
                ov_[dd] = av[t];
            }
        }
    }
}

// dQ with one work-item per RQ query rows, no barriers.
__kernel void attn_dq_rows(const int BH, const int S, const int causal, const float scale, __global const float* q,
                           __global const float* k, __global const float* v, __global const float* g,
                           __global const float* lse, __global const float* delta, __global float* dq) {
    const int nqb = (S + RQ - 1) / RQ;
    const int gid = get_global_id(0);
    if (gid >= BH * nqb) return;
    const int bh = gid / nqb;
    const int q0 = (gid - bh * nqb) * RQ;
    const size_t base = (size_t)bh * S * HD;
    float qr[RQ][HD];
    float gr[RQ][HD];
    float acc[RQ][HD];
    float lr[RQ];
    float dr[RQ];
    for (int r = 0; r < RQ; ++r) {
        const int qi = min(q0 + r, S - 1);
        for (int dd = 0; dd < HD; ++dd) {
            qr[r][dd] = q[base + (size_t)qi * HD + dd];
            gr[r][dd] = g[base + (size_t)qi * HD + dd];
            acc[r][dd] = 0.0f;
        }
        lr[r] = lse[(size_t)bh * S + qi];
        dr[r] = delta[(size_t)bh * S + qi];
    }
    const int kend = causal ? min(S, q0 + RQ) : S;
    for (int j = 0; j < kend; ++j) {
        __global const float* kp = k + base + (size_t)j * HD;
        __global const float* vp = v + base + (size_t)j * HD;
        float s[RQ];
        float dp[RQ];
        for (int r = 0; r < RQ; ++r) {
            s[r] = 0.0f;
            dp[r] = 0.0f;
        }
        for (int dd = 0; dd < HD; ++dd) {
            const float kd = kp[dd];
            const float vd = vp[dd];
            for (int r = 0; r < RQ; ++r) {
                s[r] += qr[r][dd] * kd;
                dp[r] += gr[r][dd] * vd;
            }
        }
        float dsv[RQ];
        for (int r = 0; r < RQ; ++r) {
            const bool ok = !causal || j <= q0 + r;
            dsv[r] = ok ? exp(s[r] * scale - lr[r]) * (dp[r] - dr[r]) : 0.0f;
        }
        for (int dd = 0; dd < HD; ++dd) {
            const float kd = kp[dd];
            for (int r = 0; r < RQ; ++r) acc[r][dd] += dsv[r] * kd;
        }
    }
    for (int r = 0; r < RQ; ++r) {
        const int qi = q0 + r;
        if (qi >= S) break;
        for (int dd = 0; dd < HD; ++dd) dq[base + (size_t)qi * HD + dd] = acc[r][dd] * scale;
    }
}

// dK and dV with one work-item per RQ key rows, no barriers (looping over queries avoids atomics).
__kernel void attn_dkv_rows(const int BH, const int S, const int causal, const float scale, __global const float* q,
                            __global const float* k, __global const float* v, __global const float* g,
                            __global const float* lse, __global const float* delta, __global float* dk,
                            __global float* dv) {
    const int nkb = (S + RQ - 1) / RQ;
    const int gid = get_global_id(0);
    if (gid >= BH * nkb) return;
    const int bh = gid / nkb;
    const int j0 = (gid - bh * nkb) * RQ;
    const size_t base = (size_t)bh * S * HD;
    float kr[RQ][HD];
    float vr[RQ][HD];
    float ak[RQ][HD];
    float av[RQ][HD];
    for (int r = 0; r < RQ; ++r) {
        const int kj = min(j0 + r, S - 1);
        for (int dd = 0; dd < HD; ++dd) {
            kr[r][dd] = k[base + (size_t)kj * HD + dd];
            vr[r][dd] = v[base + (size_t)kj * HD + dd];
            ak[r][dd] = 0.0f;
            av[r][dd] = 0.0f;
        }
    }
    for (int i = causal ? j0 : 0; i < S; ++i) {
        __global const float* qp = q + base + (size_t)i * HD;
        __global const float* gp = g + base + (size_t)i * HD;
        float s[RQ];
        float dp[RQ];
        for (int r = 0; r < RQ; ++r) {
            s[r] = 0.0f;
            dp[r] = 0.0f;
        }
        for (int dd = 0; dd < HD; ++dd) {
            const float qd = qp[dd];
            const float gd = gp[dd];
            for (int r = 0; r < RQ; ++r) {
                s[r] += kr[r][dd] * qd;
                dp[r] += vr[r][dd] * gd;
            }
        }
        const float li = lse[(size_t)bh * S + i];
        const float di = delta[(size_t)bh * S + i];
        float p[RQ];
        float d[RQ];
        for (int r = 0; r < RQ; ++r) {
            const bool ok = !causal || i >= j0 + r;
            p[r] = ok ? exp(s[r] * scale - li) : 0.0f;
            d[r] = p[r] * (dp[r] - di);
        }
        for (int dd = 0; dd < HD; ++dd) {
            const float qd = qp[dd];
            const float gd = gp[dd];
            for (int r = 0; r < RQ; ++r) {
                av[r][dd] += p[r] * gd;
                ak[r][dd] += d[r] * qd;
            }
        }
    }
    for (int r = 0; r < RQ; ++r) {
        const int kj = j0 + r;
        if (kj >= S) break;
        for (int dd = 0; dd < HD; ++dd) {
            dk[base + (size_t)kj * HD + dd] = ak[r][dd] * scale;
            dv[base + (size_t)kj * HD + dd] = av[r][dd];
        }
    }
}

// Decode, one work-item per (bh, chunk): the chunk's running max, sum and unnormalised accumulator go to
// part[(bh·NC + chunk)·(HD + 2) + {0, 1, 2…}].
__kernel void attn_decode_item(const int BH, const int C, const int L, const int NC, const float scale,
                               __global const float* q, __global const float* k, __global const float* v,
                               __global float* part) {
    const int gid = get_global_id(0);
    if (gid >= BH * NC) return;
    const int bh = gid / NC;
    const int ch = gid - bh * NC;
    const int CL = (L + NC - 1) / NC;
    const int j0 = ch * CL;
    const int j1 = min(L, j0 + CL);
    float qr[HD];
    float acc[HD];
    for (int dd = 0; dd < HD; ++dd) {
        qr[dd] = q[(size_t)bh * HD + dd] * scale;
        acc[dd] = 0.0f;
    }
    float m = -INFINITY;
    float l = 0.0f;
    __global const float* kb = k + (size_t)bh * C * HD;
    __global const float* vb = v + (size_t)bh * C * HD;
    for (int j = j0; j < j1; ++j) {
        float s = 0.0f;
        for (int dd = 0; dd < HD; ++dd) s += qr[dd] * kb[(size_t)j * HD + dd];
        const float mn = fmax(m, s);
        const float corr = exp(m - mn);
        const float p = exp(s - mn);
        l = l * corr + p;
        for (int dd = 0; dd < HD; ++dd) acc[dd] = acc[dd] * corr + p * vb[(size_t)j * HD + dd];
        m = mn;
    }
    __global float* pp = part + (size_t)gid * (HD + 2);
    pp[0] = m;
    pp[1] = l;
    for (int dd = 0; dd < HD; ++dd) pp[2 + dd] = acc[dd];
}

// Decode, one work-group per (bh, chunk): each item scores one key of a tile of get_local_size(0) keys, then
// every item accumulates the columns it owns. `qs` holds HD floats, `ss` one float per item.
__kernel void attn_decode_wg(const int C, const int L, const int NC, const float scale, __global const float* q,
                             __global const float* k, __global const float* v, __global float* part,
                             __local float* qs, __local float* ss) {
    const int lid = get_local_id(0);
    const int T = get_local_size(0);
    const int gid = get_group_id(0);
    const int bh = gid / NC;
    const int ch = gid - bh * NC;
    const int CL = (L + NC - 1) / NC;
    const int j0 = ch * CL;
    const int j1 = min(L, j0 + CL);
    for (int dd = lid; dd < HD; dd += T) qs[dd] = q[(size_t)bh * HD + dd] * scale;
    __global const float* kb = k + (size_t)bh * C * HD;
    __global const float* vb = v + (size_t)bh * C * HD;
    float acc[(HD + 31) / 32];
    for (int i = 0; i < (HD + 31) / 32; ++i) acc[i] = 0.0f;
    float m = -INFINITY;
    float l = 0.0f;
    for (int t0 = j0; t0 < j1; t0 += T) {
        barrier(CLK_LOCAL_MEM_FENCE);
        const int j = t0 + lid;
        float s = -INFINITY;
        if (j < j1) {
            s = 0.0f;
            for (int dd = 0; dd < HD; ++dd) s += qs[dd] * kb[(size_t)j * HD + dd];
        }
        ss[lid] = s;
        barrier(CLK_LOCAL_MEM_FENCE);
        const int nt = min(T, j1 - t0);
        float mn = m;
        for (int t = 0; t < nt; ++t) mn = fmax(mn, ss[t]);
        barrier(CLK_LOCAL_MEM_FENCE);
        ss[lid] = j < j1 ? exp(s - mn) : 0.0f;
        const float corr = exp(m - mn);
        m = mn;
        barrier(CLK_LOCAL_MEM_FENCE);
        l *= corr;
        for (int i = 0; i < (HD + 31) / 32; ++i) acc[i] *= corr;
        for (int t = 0; t < nt; ++t) {
            const float p = ss[t];
            l += p;
            __global const float* vp = vb + (size_t)(t0 + t) * HD;
            for (int i = 0; i < (HD + 31) / 32; ++i) {
                const int dd = lid + i * T;
                if (dd < HD) acc[i] += p * vp[dd];
            }
        }
    }
    __global float* pp = part + (size_t)gid * (HD + 2);
    if (lid == 0) {
        pp[0] = m;
        pp[1] = l;
    }
    for (int i = 0; i < (HD + 31) / 32; ++i) {
        const int dd = lid + i * T;
        if (dd < HD) pp[2 + dd] = acc[i];
    }
}

// Merges the NC partial results of each (bh) into o[bh, 0, :]; one work-item per (bh, column).
__kernel void attn_decode_combine(const int BH, const int NC, __global const float* part, __global float* o) {
    const int gid = get_global_id(0);
    if (gid >= BH * HD) return;
    const int bh = gid / HD;
    const int dd = gid - bh * HD;
    __global const float* pb = part + (size_t)bh * NC * (HD + 2);
    float m = -INFINITY;
    for (int c = 0; c < NC; ++c) m = fmax(m, pb[c * (HD + 2)]);
    float l = 0.0f;
    float a = 0.0f;
    for (int c = 0; c < NC; ++c) {
        const float mc = pb[c * (HD + 2)];
        if (mc == -INFINITY) continue;
        const float w = exp(mc - m);
        l += pb[c * (HD + 2) + 1] * w;
        a += pb[c * (HD + 2) + 2 + dd] * w;
    }
    o[gid] = l > 0.0f ? a / l : 0.0f;
}
