#!/usr/bin/env bash
# Assembles one build of a kernel family for an NVIDIA GPU without one: clang compiles the family's OpenCL C
# (kernels/prelude.cl + kernels/<family>.cl, with the defines given) to PTX, and NVIDIA's ptxas assembles that
# PTX for the architecture, reporting errors in inline PTX, registers, spills and local (shared) memory.
#
#   scripts/ptx-check.sh gemm_tc -DTC_PTX=1 -DPREC=1 -DA_HALF=1 -DB_HALF=1 -DOUT_HALF=1 -DVEC=1 -DSTAGES=2 \
#       -DBM=128 -DBN=128 -DBK=32 -DWM=64 -DWN=32
#
# Needs clang (15 or later; CLANG=...) and ptxas (PTXAS=...; `pip download nvidia-cuda-nvcc-cu12` holds one
# under nvidia/cuda_nvcc/bin). ARCH defaults to sm_90. clang's code is not NVIDIA's OpenCL compiler's, so the
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
#define vload_half(i, p) ncl_h2f(((const ushort*)(p))[i])
#define vload_half4(i, p) ((float4)(vload_half(4 * (i), p), vload_half(4 * (i) + 1, p), vload_half(4 * (i) + 2, p), vload_half(4 * (i) + 3, p)))
#define vloada_half4 vload_half4
#define vstore_half_rte(v, i, p) (((ushort*)(p))[i] = ncl_f2h(v))
#define vstore_half4_rte(v, i, p) do { float4 v_ = (v); ushort* q_ = (ushort*)(p) + 4 * (i); \
    q_[0] = ncl_f2h(v_.s0); q_[1] = ncl_f2h(v_.s1); q_[2] = ncl_f2h(v_.s2); q_[3] = ncl_f2h(v_.s3); } while (0)
#define vstorea_half4_rte vstore_half4_rte
SHIM
cat "$root/kernels/prelude.cl" "$root/kernels/$family.cl" > "$work/src.cl"
"$clang" -x cl -cl-std=CL2.0 -target nvptx64-nvidia-cuda -Xclang -target-cpu -Xclang sm_80 -O3 -S \
    -Dasm=__asm__ -Xclang -finclude-default-header -include "$work/shim.h" "$@" -o "$work/out.ptx" "$work/src.cl"
# clang 15 writes PTX for sm_80; the instructions used here are the same on later architectures.
sed -i "s/^\.target sm_[0-9]*.*/.target $arch/; s/^\.version .*/.version 8.0/" "$work/out.ptx"
"$ptxas" -arch="$arch" -v "$work/out.ptx" -o "$work/out.cubin" 2>&1 | grep -v "^ptxas info    : Compiling"
