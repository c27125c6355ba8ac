// Winograd F(WM x WM, 3 x 3) transforms for stride-1 3x3 convolutions (Lavin and Gray, "Fast Algorithms for
// Convolutional Neural Networks", 2016): WM = 2 (4x4 tiles, 2.25x fewer multiplications than direct) or WM = 4
// (6x6 tiles, 4x fewer, slightly larger rounding error). Build with -D WM=2 or -D WM=4.
//
// Layouts: U[ab][f][c] (transformed filters), V[ab][c][nt] (transformed input tiles), M[ab][f][nt] (their
// products), nt = n * T + t over the T = TH * TW output tiles of each image. Every transform runs one tile per
// work-item with dimension 0 over nt, so neighbouring work-items touch neighbouring elements of V and M.
// The matrices are compile-time constants: fully unrolled loops fold the zeros and ones away.
// With -D VT=1 the input transform writes V[ab][nt][c] instead (grad_w's product D[ab] · V[ab]^T then needs
// no transposed operand, which CPU OpenCL's register-blocked GEMM kernels want).
#ifndef VT
#define VT 0
#endif

#define AL (WM + 2)

#if WM == 2
__constant float BT[AL][AL] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
__constant float G[AL][3] = {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
__constant float AT[WM][AL] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
#elif WM == 4
__constant float BT[AL][AL] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                               {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
__constant float G[AL][3] = {{0.25f, 0, 0},
                             {-1.0f / 6, -1.0f / 6, -1.0f / 6},
                             {-1.0f / 6, 1.0f / 6, -1.0f / 6},
                             {1.0f / 24, 1.0f / 12, 1.0f / 6},
                             {1.0f / 24, -1.0f / 12, 1.0f / 6},
                             {0, 0, 1}};
__constant float AT[WM][AL] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
#else
#error "WM must be 2 or 4"
#endif

// U[ab][f][c] = (G g G^T)[a][b] for the 3x3 filter g = w[f][c]. One filter per work-item.
__kernel void wino_filter(const int F, const int C, __global const float* restrict w, __global float* restrict U)
{
    const int i = get_global_id(0);
    if (i >= F * C) return;
    __global const float* g = w + (size_t)i * 9;
    float gv[3][3];
#pragma unroll
    for (int p = 0; p < 9; ++p) gv[p / 3][p % 3] = g[p];
    float t[AL][3];
#pragma unroll
    for (int a = 0; a < AL; ++a)
#pragma unroll
        for (int j = 0; j < 3; ++j) t[a][j] = G[a][0] * gv[0][j] + G[a][1] * gv[1][j] + G[a][2] * gv[2][j];
    const size_t FC = (size_t)F * C;
#pragma unroll
    for (int a = 0; a < AL; ++a)
#pragma unroll
        for (int b = 0; b < AL; ++b) U[(a * AL + b) * FC + i] = t[a][0] * G[b][0] + t[a][1] * G[b][1] + t[a][2] * G[b][2];
}

// V[ab][c][nt] = (B^T d B)[a][b] for the AL x AL input patch d of tile nt (origin WM * (ty, tx) - pad, zero
// outside the image). Dimension 0 over nt, 1 over channels (with VT: V[ab][nt][c], dimension 0 over channels).
__kernel void wino_input(const int N, const int C, const int H, const int W, const int PH, const int PW,
                         const int TH, const int TW, __global const float* restrict x, __global float* restrict V)
{
    const int T = TH * TW, NT = N * T;
#if VT
    // Dimension 0 over channels: neighbouring work-items write neighbouring elements of V[ab][nt][c].
    const int nt = get_global_id(1), c = get_global_id(0);
#else
    const int nt = get_global_id(0), c = get_global_id(1);
#endif
    if (nt >= NT || c >= C) return;
    const int n = nt / T, t = nt - n * T;
    const int ty = t / TW, tx = t - ty * TW;
    const int y0 = ty * WM - PH, x0 = tx * WM - PW;
    __global const float* xp = x + ((size_t)n * C + c) * H * W;
    float d[AL][AL];
#pragma unroll
    for (int i = 0; i < AL; ++i)
#pragma unroll
        for (int j = 0; j < AL; ++j) {
            const int y = y0 + i, xx = x0 + j;
            d[i][j] = (y >= 0 && y < H && xx >= 0 && xx < W) ? xp[y * W + xx] : 0.0f;
        }
    float e[AL][AL];
#pragma unroll
    for (int a = 0; a < AL; ++a)
#pragma unroll
        for (int j = 0; j < AL; ++j) {
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < AL; ++i) s += BT[a][i] * d[i][j];
            e[a][j] = s;
        }
#if VT
    // V transposed per element: [α²][NT][C] (the layout of the untransposed B of grad_w's products).
    const size_t stride = (size_t)C * NT, o = (size_t)nt * C + c;
#else
    const size_t stride = (size_t)C * NT, o = (size_t)c * NT + nt;
#endif
#pragma unroll
    for (int a = 0; a < AL; ++a)
#pragma unroll
        for (int b = 0; b < AL; ++b) {
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < AL; ++j) s += e[a][j] * BT[b][j];
            V[(a * AL + b) * stride + o] = s;
        }
}

// out[n][f][WM ty + i][WM tx + j] = (A^T M A)[i][j] + bias[f] (cropped to OH x OW), optional ReLU.
// Dimension 0 over nt, 1 over filters.
__kernel void wino_output(const int N, const int F, const int OH, const int OW, const int TH, const int TW,
                          __global const float* restrict Mt, __global const float* restrict bias,
                          const int has_bias, const int relu, __global float* restrict out)
{
    const int T = TH * TW, NT = N * T;
    const int nt = get_global_id(0), f = get_global_id(1);
    if (nt >= NT || f >= F) return;
    const int n = nt / T, t = nt - n * T;
    const int ty = t / TW, tx = t - ty * TW;
    const size_t stride = (size_t)F * NT, o = (size_t)f * NT + nt;
    float m[AL][AL];
#pragma unroll
    for (int k = 0; k < AL * AL; ++k) m[k / AL][k % AL] = Mt[k * stride + o];
    float r[WM][AL];
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int b = 0; b < AL; ++b) {
            float s = 0.0f;
#pragma unroll
            for (int a = 0; a < AL; ++a) s += AT[i][a] * m[a][b];
            r[i][b] = s;
        }
    const float bb = has_bias ? bias[f] : 0.0f;
    const int oy = ty * WM, ox = tx * WM;
    __global float* op = out + ((size_t)n * F + f) * OH * OW;
#pragma unroll
    for (int i = 0; i < WM; ++i) {
        if (oy + i >= OH) break;
#pragma unroll
        for (int j = 0; j < WM; ++j) {
            float s = bb;
#pragma unroll
            for (int b = 0; b < AL; ++b) s += r[i][b] * AT[j][b];
            if (relu) s = s < 0.0f ? 0.0f : s;
            if (ox + j < OW) op[(oy + i) * OW + ox + j] = s;
        }
    }
}

// Weight gradient, step 1: D[ab][f][nt] = (A y A^T)[a][b] for the WM x WM tile y of grad_out (zero outside
// OH x OW): the adjoint of the output transform. Dimension 0 over nt, 1 over filters.
__kernel void wino_grad_out(const int N, const int F, const int OH, const int OW, const int TH, const int TW,
                            __global const float* restrict go, __global float* restrict D)
{
    const int T = TH * TW, NT = N * T;
    const int nt = get_global_id(0), f = get_global_id(1);
    if (nt >= NT || f >= F) return;
    const int n = nt / T, t = nt - n * T;
    const int ty = t / TW, tx = t - ty * TW;
    const int oy = ty * WM, ox = tx * WM;
    __global const float* gp = go + ((size_t)n * F + f) * OH * OW;
    float y[WM][WM];
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int j = 0; j < WM; ++j) y[i][j] = (oy + i < OH && ox + j < OW) ? gp[(oy + i) * OW + ox + j] : 0.0f;
    float z[AL][WM];
#pragma unroll
    for (int a = 0; a < AL; ++a)
#pragma unroll
        for (int j = 0; j < WM; ++j) {
            float s = 0.0f;
#pragma unroll
            for (int i = 0; i < WM; ++i) s += AT[i][a] * y[i][j];
            z[a][j] = s;
        }
    const size_t stride = (size_t)F * NT, o = (size_t)f * NT + nt;
#pragma unroll
    for (int a = 0; a < AL; ++a)
#pragma unroll
        for (int b = 0; b < AL; ++b) {
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < WM; ++j) s += z[a][j] * AT[j][b];
            D[(a * AL + b) * stride + o] = s;
        }
}

// Weight gradient, step 3: gw[f][c] = G^T dU G for dU = Mw[ab][f][c] (the batched product of D and V^T): the
// adjoint of the filter transform. One (f, c) per work-item.
__kernel void wino_grad_filter(const int F, const int C, __global const float* restrict Mw,
                               __global float* restrict gw)
{
    const int i = get_global_id(0);
    if (i >= F * C) return;
    const size_t FC = (size_t)F * C;
    float u[AL][AL];
#pragma unroll
    for (int k = 0; k < AL * AL; ++k) u[k / AL][k % AL] = Mw[k * FC + i];
    float r[3][AL];
#pragma unroll
    for (int p = 0; p < 3; ++p)
#pragma unroll
        for (int b = 0; b < AL; ++b) {
            float s = 0.0f;
#pragma unroll
            for (int a = 0; a < AL; ++a) s += G[a][p] * u[a][b];
            r[p][b] = s;
        }
    __global float* o = gw + (size_t)i * 9;
#pragma unroll
    for (int p = 0; p < 3; ++p)
#pragma unroll
        for (int q = 0; q < 3; ++q) {
            float s = 0.0f;
#pragma unroll
            for (int b = 0; b < AL; ++b) s += r[p][b] * G[b][q];
            o[p * 3 + q] = s;
        }
}
