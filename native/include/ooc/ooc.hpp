// libooc's C++ API: out-of-core layers over host-resident tensors.
//
// Every function takes host pointers (pageable, pinned or memory-mapped), splits the operation into
// chunks that fit `Options::memory_limit` bytes of device memory, and streams them through a backend:
// "cuda" (cuDNN on the GPU) or "host" (reference kernels on the CPU, same pipeline and budget).
#pragma once

#include <cstddef>
#include <string>

#include "ooc/errors.hpp"
#include "ooc/plan.hpp"
#include "ooc/problem.hpp"
#include "ooc/types.hpp"

namespace ooc {

// Process-wide default memory limit (bytes); 0 means "most of the free device memory"
// (or 1 GiB on the host backend).
void set_default_memory_limit(size_t bytes);
size_t default_memory_limit();

// Called on the calling thread just before each run, with the plan about to run and whether the
// call asked for backend automatic and got the host one (no GPU present); it must not throw (it
// is no noexcept type so that Cython can give one). Process-wide, nullptr for none. pyooc logs
// plans and warns about long host fallbacks through it (pyooc/_plan_log.py).
using PlanObserver = void (*)(const Plan& plan, bool automatic_chose_host);
void set_plan_observer(PlanObserver observer) noexcept;

int device_count() noexcept;                  // 0 without a GPU or driver; never throws
int cudnn_version_runtime() noexcept;         // cudnnGetVersion()
int cudnn_version_build() noexcept;           // CUDNN_VERSION at build time
int cuda_runtime_version() noexcept;          // 0 when no driver
std::string cudnn_library_path();             // where libcudnn.so.9 was loaded from ("" if unknown)

// Plans without running. Throws out_of_budget when nothing fits. Each takes a problem of its own
// operation (ConvProblem::forward, ::backward_data, ...; invalid_argument otherwise).
Plan plan_conv_forward(const ConvProblem& problem, const Options& options);
Plan plan_conv_backward_data(const ConvProblem& problem, const Options& options);
Plan plan_conv_backward_filter(const ConvProblem& problem, const Options& options);
Plan plan_conv_backward_bias(const ConvProblem& problem, const Options& options);

// y = alpha * conv(x, w) + beta * y + bias. bias may be null (problem.has_bias says which).
// When `used` / `stats` are not null they receive the plan that ran and what it measured. Every
// tensor holds elements of problem.dtype (float32, float16 or bfloat16; the latter two computed
// in float32, their reductions over C or K kept inside a chunk, dw and db accumulated across
// chunks in float32: ConvProblem::output_dtype).
void conv_forward(const ConvProblem& problem, const void* x, const void* w, const void* bias, void* y,
                  const Options& options, Plan* used = nullptr, RunStats* stats = nullptr);

// The gradients, cuDNN's BackwardData / BackwardFilter / BackwardBias (problem.hpp says what each
// computes); beta scales the caller's output once. Pointers as for conv_forward; the output is
// never read when beta == 0.
void conv_backward_data(const ConvProblem& problem, const void* dy, const void* w, void* dx, const Options& options,
                        Plan* used = nullptr, RunStats* stats = nullptr);
void conv_backward_filter(const ConvProblem& problem, const void* x, const void* dy, void* dw, const Options& options,
                          Plan* used = nullptr, RunStats* stats = nullptr);
void conv_backward_bias(const ConvProblem& problem, const void* dy, void* db, const Options& options,
                        Plan* used = nullptr, RunStats* stats = nullptr);

// Pinned-host <-> device copy bandwidth measured now (bytes/s): each direction alone and both at
// once (total). The link roofline of an out-of-core op. Throws cuda_error without a GPU.
LinkBandwidth measure_link_bandwidth(int device = 0, size_t bytes = size_t{256} << 20);

// Page-locked host memory (cudaHostAlloc) for callers that want DMA-speed arrays; throws cuda_error
// without a GPU. Free with free_pinned.
void* alloc_pinned(size_t bytes);
void free_pinned(void* ptr) noexcept;
// Page-locks `bytes` of existing host memory at `ptr` in place (cudaHostRegister; 0.16 s for 4 GiB
// on the H200's host, against 2.8 s to allocate as much), so calls move it by DMA; unregister_pinned
// undoes it, before the memory is freed. Both throw cuda_error, also without a GPU.
void register_pinned(void* ptr, size_t bytes);
void unregister_pinned(void* ptr);

// Device arrays of other libraries (CuPy, torch CUDA), which the convolutions read and write in
// place: every function above takes device pointers too and copies them at device speed.
// The GPU whose memory holds `ptr`, or -1 for host memory of any kind (and without a GPU). Never throws.
int device_memory_ordinal(const void* ptr) noexcept;
// Waits for the producer's work on its arrays before a call reads them: `stream` as
// __cuda_array_interface__ gives it (a cudaStream_t as an integer; 1 and 2 CUDA's default streams),
// or 0 when it names none, which waits for all of `device`'s work. Throws cuda_error.
void wait_for_stream(uintptr_t stream, int device);

namespace testing {
// Test-only fault injection: the `countdown`-th next operation of kind `where` fails as if the
// library doing it had returned an error, so tests can prove error paths drain the queues, free
// everything and leave the library usable. Kinds, one per counter, each with what it throws:
//   "copy"        a host <-> device copy, contiguous or strided       cuda_error
//   "conv"        a convolution forward or one of its gradients      cudnn_error
//   "gemm"        a matmul chunk's GEMM (cuBLAS)                     cuda_error
//   "batchnorm"   a batch-norm reduction or affine pass              cuda_error
//   "activation", "softmax", "pool", "add"   those layers (cuDNN)    cudnn_error
//   "device_copy" a copy or zeroing within device memory             cuda_error
// countdown <= 0 disarms; any other `where` throws invalid_argument naming the valid ones. The
// cuda backend always honours it; the host backend only after set_host_fault_injection(true).
void inject_fault(const std::string& where, int64_t countdown);

// Test-only: makes the host backend honour inject_fault too (off by default, so that a fault armed
// for the cuda backend leaves host calls alone), which tests the error paths where no GPU is.
void set_host_fault_injection(bool enabled);

// Test-only: makes the host backend treat all caller memory as pinned, so CI exercises the
// pipeline's direct-DMA path (strided copies, device-side halo zeroing) without a GPU.
void set_host_direct_access(bool enabled);
}  // namespace testing

}  // namespace ooc
