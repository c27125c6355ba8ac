#!/usr/bin/env bash
# Assembles one build of a kernel family for an NVIDIA GPU without one: clang compiles the family's OpenCL C
# (kernels/prelude.cl + kernels/<family>.cl, with the defines given) to PTX, and NVIDIA's ptxas assembles that
# PTX for the architecture, reporting errors in inline PTX, registers, spills and local (shared) memory.
#
#   scripts/ptx-check.sh gemm_tc -DTC_PTX=1 -DPREC=1 -DA_HALF=1 -DB_HALF=1 -DOUT_HALF=1 -DVEC=1 -DSTAGES=2 \
#       -DBM=128 -DBN=128 -DBK=32 -DWM=64 -DWN=32
#
# Needs clang (15 or later; CLANG=...) and ptxas (PTXAS=...; `pip download nvidia-cuda-nvcc-cu12` holds one
# under nvidia/cuda_nvcc/bin, and under nvidia/cuda_nvcc/nvvm the libdevice that math functions link against;
# LIBDEVICE=... elsewhere). ARCH defaults to sm_90. clang's code is not NVIDIA's OpenCL compiler's, so the
# register counts are an estimate; what ptxas rejects, the driver rejects too.
set -euo pipefail
family=${1:?usage: ptx-check.sh FAMILY [-DNAME=VALUE ...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
clang=${CLANG:-$(command -v clang || command -v clang-15 || true)}
ptxas=${PTXAS:-$(command -v ptxas || true)}
arch=${ARCH:-sm_90}
[ -n "$clang" ] || { echo "ptx-check: no clang (set CLANG)" >&2; exit 2; }
[ -n "$ptxas" ] || { echo "ptx-check: no ptxas (set PTXAS)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# OpenCL's work-item functions, barrier and half conversions, which clang's NVPTX target leaves undefined.
cat > "$work/shim.h" <<'SHIM'
static inline size_t ncl_sreg(uint d, uint x, uint y, uint z) { return d == 0 ? x : d == 1 ? y : z; }
#define get_local_id(d) ncl_sreg(d, __nvvm_read_ptx_sreg_tid_x(), __nvvm_read_ptx_sreg_tid_y(), __nvvm_read_ptx_sreg_tid_z())
#define get_group_id(d) ncl_sreg(d, __nvvm_read_ptx_sreg_ctaid_x(), __nvvm_read_ptx_sreg_ctaid_y(), __nvvm_read_ptx_sreg_ctaid_z())
#define get_local_size(d) ncl_sreg(d, __nvvm_read_ptx_sreg_ntid_x(), __nvvm_read_ptx_sreg_ntid_y(), __nvvm_read_ptx_sreg_ntid_z())
#define get_num_groups(d) ncl_sreg(d, __nvvm_read_ptx_sreg_nctaid_x(), __nvvm_read_ptx_sreg_nctaid_y(), __nvvm_read_ptx_sreg_nctaid_z())
#define get_global_id(d) (get_group_id(d) * get_local_size(d) + get_local_id(d))
#define get_global_size(d) (get_num_groups(d) * get_local_size(d))
#define barrier(f) __asm__ volatile("bar.sync 0;" ::: "memory")
static inline ushort ncl_f2h(float x) { ushort r; __asm__("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x)); return r; }
static inline float ncl_h2f(ushort x) { float r; __asm__("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(x)); return r; }
static inline int ncl_clampi(int x, int a, int b) { return x < a ? a : (x > b ? b : x); }
#define clamp(x, a, b) ncl_clampi(x, a, b)
#define min(a, b) ((a) < (b) ? (a) : (b))
#define max(a, b) ((a) > (b) ? (a) : (b))
#define fma(a, b, c) ((a) * (b) + (c))
#define mad(a, b, c) ((a) * (b) + (c))
#define vload_half(i, p) ncl_h2f(((const ushort*)(p))[i])
#define vload_half4(i, p) ((float4)(vload_half(4 * (i), p), vload_half(4 * (i) + 1, p), vload_half(4 * (i) + 2, p), vload_half(4 * (i) + 3, p)))
#define vloada_half4 vload_half4
#define vstore_half_rte(v, i, p) (((ushort*)(p))[i] = ncl_f2h(v))
#define vstore_half4_rte(v, i, p) do { float4 v_ = (v); ushort* q_ = (ushort*)(p) + 4 * (i); \
    q_[0] = ncl_f2h(v_.s0); q_[1] = ncl_f2h(v_.s1); q_[2] = ncl_f2h(v_.s2); q_[3] = ncl_f2h(v_.s3); } while (0)
#define vstorea_half4_rte vstore_half4_rte
#define vload_half8(i, p) ((float8)(vload_half4(2 * (i), p), vload_half4(2 * (i) + 1, p)))
#define vloada_half8 vload_half8
#define vstore_half8_rte(v, i, p) do { float8 w_ = (v); vstore_half4_rte(w_.lo, 2 * (i), p); \
    vstore_half4_rte(w_.hi, 2 * (i) + 1, p); } while (0)
#define vstorea_half8_rte vstore_half8_rte
#define vload4(i, p) ((float4)((p)[4 * (i)], (p)[4 * (i) + 1], (p)[4 * (i) + 2], (p)[4 * (i) + 3]))
#define vload8(i, p) ((float8)(vload4(2 * (i), p), vload4(2 * (i) + 1, p)))
#define vstore4(v, i, p) do { float4 u_ = (v); (p)[4 * (i)] = u_.s0; (p)[4 * (i) + 1] = u_.s1; \
    (p)[4 * (i) + 2] = u_.s2; (p)[4 * (i) + 3] = u_.s3; } while (0)
#define vstore8(v, i, p) do { float8 u8_ = (v); vstore4(u8_.lo, 2 * (i), p); vstore4(u8_.hi, 2 * (i) + 1, p); } while (0)
// Math through libdevice (linked below), scalar and vector.
float __nv_expf(float); float __nv_fast_expf(float); float __nv_logf(float); float __nv_fast_logf(float);
float __nv_sqrtf(float); float __nv_rsqrtf(float); float __nv_tanhf(float); float __nv_erff(float);
float __nv_powf(float, float); float __nv_sinf(float); float __nv_cosf(float); float __nv_exp2f(float);
#define NCL_V1(name, f) \
  static inline float __attribute__((overloadable)) name(float x) { return f(x); } \
  static inline float2 __attribute__((overloadable)) name(float2 x) { return (float2)(f(x.x), f(x.y)); } \
  static inline float4 __attribute__((overloadable)) name(float4 x) { return (float4)(name(x.xy), name(x.zw)); } \
  static inline float8 __attribute__((overloadable)) name(float8 x) { return (float8)(name(x.lo), name(x.hi)); }
NCL_V1(ncl_exp, __nv_expf)
NCL_V1(ncl_native_exp, __nv_fast_expf)
NCL_V1(ncl_exp2, __nv_exp2f)
NCL_V1(ncl_log, __nv_logf)
NCL_V1(ncl_native_log, __nv_fast_logf)
NCL_V1(ncl_sqrt, __nv_sqrtf)
NCL_V1(ncl_rsqrt, __nv_rsqrtf)
NCL_V1(ncl_tanh, __nv_tanhf)
NCL_V1(ncl_erf, __nv_erff)
#define exp ncl_exp
#define native_exp ncl_native_exp
#define exp2 ncl_exp2
#define log ncl_log
#define native_log ncl_native_log
#define sqrt ncl_sqrt
#define rsqrt ncl_rsqrt
#define native_rsqrt ncl_rsqrt
#define tanh ncl_tanh
#define erf ncl_erf
#define pow(a, b) __nv_powf(a, b)
#define sin(x) __nv_sinf(x)
#define cos(x) __nv_cosf(x)
static inline int ncl_atom_add(volatile void* p, int v) { int r; __asm__ volatile("atom.add.u32 %0, [%1], %2;" : "=r"(r) : "l"(p), "r"(v) : "memory"); return r; }
static inline int ncl_atom_xchg(volatile void* p, int v) { int r; __asm__ volatile("atom.exch.b32 %0, [%1], %2;" : "=r"(r) : "l"(p), "r"(v) : "memory"); return r; }
static inline int ncl_atom_cas(volatile void* p, int c, int v) { int r; __asm__ volatile("atom.cas.b32 %0, [%1], %2, %3;" : "=r"(r) : "l"(p), "r"(c), "r"(v) : "memory"); return r; }
#define atomic_inc(p) ncl_atom_add((p), 1)
#define atomic_add(p, v) ncl_atom_add((p), (v))
#define atomic_xchg(p, v) ncl_atom_xchg((p), (v))
#define atomic_cmpxchg(p, c, v) ncl_atom_cas((p), (c), (v))
#define mem_fence(f) __asm__ volatile("membar.gl;" ::: "memory")
#define isnan(x) __builtin_isnan(x)
#define isinf(x) __builtin_isinf(x)
#define isfinite(x) __builtin_isfinite(x)
#define fabs(x) __builtin_fabsf(x)
#define fmax(a, b) __builtin_fmaxf(a, b)
#define fmin(a, b) __builtin_fminf(a, b)
SHIM
cat "$root/kernels/prelude.cl" "$root/kernels/$family.cl" > "$work/src.cl"
libdevice=${LIBDEVICE:-$(dirname "$ptxas")/../nvvm/libdevice/libdevice.10.bc}
[ -f "$libdevice" ] || { echo "ptx-check: no libdevice.10.bc (set LIBDEVICE)" >&2; exit 2; }
"$clang" -x cl -cl-std=CL2.0 -target nvptx64-nvidia-cuda -Xclang -target-cpu -Xclang sm_80 -O3 -ffp-contract=fast -S \
    -Dasm=__asm__ -Xclang -finclude-default-header -include "$work/shim.h" \
    -Xclang -mlink-builtin-bitcode -Xclang "$libdevice" "$@" -o "$work/out.ptx" "$work/src.cl"
# clang 15 writes PTX for sm_80; the instructions used here are the same on later architectures. PTX_VERSION
# (default 8.0) is the ISA version the PTX declares.
sed -i "s/^\.target sm_[0-9]*.*/.target $arch/; s/^\.version .*/.version ${PTX_VERSION:-8.0}/" "$work/out.ptx"
"$ptxas" -arch="$arch" -v "$work/out.ptx" -o "$work/out.cubin" 2>&1 | grep -v "^ptxas info    : Compiling"
# KEEP=DIR keeps the PTX and the assembled cubin (for `cuobjdump -sass`).
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work/out.ptx" "$work/out.cubin" "$KEEP/"; fi
