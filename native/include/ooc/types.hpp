// libooc's vocabulary: the types every layer of the library and every operation header share
// (call options, what a run measured, the layers' modes). Operation headers (ooc.hpp, layers.hpp,
// pool_activation_softmax.hpp, fused.hpp) declare functions over these; the library's lower layers
// (plan/, backend/, exec/) include this header, never an operation header.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ooc {

enum class BackendKind { automatic, host, cuda };  // automatic: cuda when a GPU is present

// How float32 convolutions and GEMMs multiply on the cuda backend (docs/precision.md). fp32: full
// single precision, FMA kernels only (the default, so a result never silently loses bits). tf32:
// tensor cores may read the operands rounded to TF32 (10 mantissa bits; results within about 5e-3
// of the norm) and accumulate in float32. Half precision uses tensor cores either way and the host
// backend computes full FP32 either way, so both ignore it.
enum class MathMode { fp32, tf32 };
const char* math_mode_name(MathMode mode);  // "fp32", "tf32"
struct MachineModel;  // plan.hpp

// Where a call stands, as its observer sees it: chunks completed of all the call's chunks (every
// pass: batch norm's two count twice), and what the plan predicted for the whole call.
struct ChunkProgress {
  int64_t done = 0, total = 0;
  double predicted_seconds = 0;
};

// Watches one call between its chunks, for cancellation and progress (docs/interruptible_calls.md).
// Plain data, nothing virtual: per chunk the pipeline pays one relaxed atomic load and, when
// on_chunk is set, one indirect call. A cancelled call stops issuing chunks, drains the queues
// (no host buffer is freed or reused while a copy into or out of it is in flight), frees its device
// and staging memory and throws ooc::cancelled; the output is then partially written.
struct CallObserver {
  // Set from any thread to cancel; not owned, may be null.
  const std::atomic<bool>* cancel = nullptr;
  // Called on the calling thread before the first chunk (done 0), as chunks complete, while the
  // call waits for the device, and once at the end (done == total). Returning false cancels, even
  // from the last report. Null: none.
  bool (*on_chunk)(void* context, const ChunkProgress* progress) = nullptr;
  void* context = nullptr;
};

struct Options {
  size_t memory_limit = 0;  // bytes of device memory the call may use; 0: the process default
  BackendKind backend = BackendKind::automatic;
  int device = 0;
  // Two or more: the call's chunks spread over these devices, each running its own pipeline under
  // memory_limit (plan/device_shares.hpp; operations that cannot spread run on the first). A device
  // listed twice gets two pipelines. With the host backend they are virtual devices, separate host
  // backends, which is how CI tests the spreading. Empty or one entry: `device` alone.
  std::vector<int> devices;
  // plan_* only (runs see the pointers): plan as if every tensor were pinned, i.e. moved by DMA
  // with no host gather/scatter.
  bool assume_pinned = false;
  // Cancellation and progress of a run (plan_* ignore it); not owned, null: none.
  const CallObserver* observer = nullptr;
  // plan_* only: plan with these figures instead of the backend's own. With backend cuda or
  // automatic the GPU need not be present (the cuda backend's workspace rules are applied without
  // it); the caller keeps the model alive for the call.
  const MachineModel* machine = nullptr;
  // float32 convolutions and GEMMs: full FP32 or TF32 allowed. Plans are kept per mode and record
  // it (Plan::math).
  MathMode math = MathMode::fp32;
};

// What one run did, measured (the plan says what it predicted).
struct RunStats {
  size_t bytes_h2d = 0, bytes_d2h = 0;   // bytes actually copied over each link direction
  size_t device_bytes_reserved = 0;      // arena size: the most device memory the run held
  int64_t chunks = 0;
  double seconds = 0;                    // wall time of the pipeline
  double gather_seconds = 0, scatter_seconds = 0, host_wait_seconds = 0;  // host worker time by stage
  // Time the issuing thread waited for the device to catch up (exec/chunk_pacer.hpp): near the
  // call's time when the device bounds it, near zero when issuing the chunks does.
  double pace_wait_seconds = 0;
  // Device time each queue was busy; -1 unless measured (cuda backend with OOC_PROFILE_QUEUES=1).
  double h2d_busy_seconds = -1, compute_busy_seconds = -1, d2h_busy_seconds = -1;
};

// RunStats of several runs as one: the passes of one operation run one after another (a layer's
// reduce then apply; the C API's batch norm), the shares of a spread call side by side on several
// devices. Bytes, chunks and host worker time add up either way; wall time adds up for sequential
// runs and is the slowest share's for parallel ones; the arena is the largest any run held.
enum class RunsWere { sequential, parallel };

inline void accumulate(RunStats& total, const RunStats& s, RunsWere runs) {
  total.bytes_h2d += s.bytes_h2d;
  total.bytes_d2h += s.bytes_d2h;
  total.device_bytes_reserved = std::max(total.device_bytes_reserved, s.device_bytes_reserved);
  total.chunks += s.chunks;
  total.seconds = runs == RunsWere::sequential ? total.seconds + s.seconds : std::max(total.seconds, s.seconds);
  total.gather_seconds += s.gather_seconds;
  total.scatter_seconds += s.scatter_seconds;
  total.host_wait_seconds += s.host_wait_seconds;
  total.pace_wait_seconds += s.pace_wait_seconds;
  // Queue busy times are -1 where unmeasured: a measured one is kept rather than summed with -1.
  auto add = [](double& a, double b) { a = a < 0 || b < 0 ? std::max(a, b) : a + b; };
  add(total.h2d_busy_seconds, s.h2d_busy_seconds);
  add(total.compute_busy_seconds, s.compute_busy_seconds);
  add(total.d2h_busy_seconds, s.d2h_busy_seconds);
}

// Every activation, in the order of ActivationMode: X(name). A mode's formula (value and gradient,
// host and device alike) lives in backend/activation_formulas.hpp; cuDNN runs those it has.
#define OOC_ACTIVATION_MODES(X) X(relu) X(sigmoid) X(tanh) X(clipped_relu) X(elu) X(swish) X(gelu) X(leaky_relu)
#define OOC_ACTIVATION_ENUMERATOR(name) name,
enum class ActivationMode { OOC_ACTIVATION_MODES(OOC_ACTIVATION_ENUMERATOR) };
#undef OOC_ACTIVATION_ENUMERATOR
const char* activation_mode_name(ActivationMode mode);  // "relu", ...
// What an activation's coef means (coef_name "": unused), its default (NaN: none, the caller must
// give it), and whether its gradient follows from y = f(x) alone (so a fused backward need not
// stream the activation's input).
struct ActivationTraits {
  const char* coef_name;
  double coef_default;
  bool gradient_from_y;
};
ActivationTraits activation_traits(ActivationMode mode);

enum class SoftmaxMode { channel, instance };  // channel: over c per (n, position); instance: over c*space per n

// Pooling (cuDNN PoolingForward): max, average counting padding (CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING)
// or average over the window's part inside the tensor (..._EXCLUDE_PADDING).
enum class PoolMode { max, avg, avg_exclude_pad };

// The activation a fused forward applies last: identity (none) or one of activation_forward's modes
// with its coef (clipped_relu's ceiling, elu's alpha, swish's beta).
struct FusedActivation {
  bool identity = false;
  ActivationMode mode = ActivationMode::relu;
  double coef = 0.0;
};

// Pinned-host <-> device copy bandwidth (bytes/s): each direction alone and both at once (total).
struct LinkBandwidth {
  double h2d = 0, d2h = 0, bidir = 0;
};

}  // namespace ooc
