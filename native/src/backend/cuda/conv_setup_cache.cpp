#include "backend/cuda/conv_setup_cache.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.hpp"

namespace ooc {
namespace {

// A process that runs many different problems must not grow the cache without bound.
constexpr size_t kMaxCachedSetups = 256;

// cuDNN's legacy descriptors take int; the planner keeps chunks far below that, so a value out
// of range is a bug upstream, reported rather than truncated.
int to_int(int64_t value, int64_t minimum, const char* what) {
  if (value < minimum || value > std::numeric_limits<int>::max())
    throw std::logic_error(std::string("cuda backend: chunk ") + what + " = " + std::to_string(value) +
                           " is outside cuDNN's range [" + std::to_string(minimum) + ", 2^31)");
  return static_cast<int>(value);
}

std::string format_dims(const int* dims, int count) {
  std::ostringstream s;
  s << "[";
  for (int i = 0; i < count; ++i) s << (i ? ", " : "") << dims[i];
  s << "]";
  return s.str();
}

// The chunk in cuDNN's terms. cuDNN's Nd convolution wants at least two spatial dims, so a 1-D
// convolution becomes a 2-D one with H = 1 (kernel 1 x k, padding 0 x p, stride 1 x s, ...).
struct CudnnGeometry {
  int tensor_dims = 4;   // 4 (NCHW) or 5 (NCDHW)
  int spatial_dims = 2;  // tensor_dims - 2
  int x[5] = {}, w[5] = {}, y[5] = {};
  int padding[3] = {}, stride[3] = {}, dilation[3] = {};
  int groups = 1;  // cudnnSetConvolutionGroupCount's: the filter holds c / groups input channels
};

CudnnGeometry geometry_of(const ChunkConv& s) {
  if (s.spatial_dims < 1 || s.spatial_dims > kMaxSpatial)
    throw std::logic_error("cuda backend: spatial_dims must be 1, 2 or 3, got " + std::to_string(s.spatial_dims));
  CudnnGeometry g;
  g.spatial_dims = std::max(2, s.spatial_dims);
  g.tensor_dims = g.spatial_dims + 2;
  g.x[0] = g.y[0] = to_int(s.n, 1, "n");
  g.x[1] = to_int(s.c, 1, "c");
  g.w[0] = g.y[1] = to_int(s.k, 1, "k");
  g.groups = to_int(s.groups, 1, "groups");
  if (s.c % s.groups != 0 || s.k % s.groups != 0)
    throw std::logic_error("cuda backend: chunk groups " + std::to_string(s.groups) + " divide neither c " +
                           std::to_string(s.c) + " nor k " + std::to_string(s.k));
  g.w[1] = to_int(s.c / s.groups, 1, "c / groups");
  const int unit_dims = g.spatial_dims - s.spatial_dims;  // leading H = 1 for 1-D
  for (int d = 0; d < g.spatial_dims; ++d) {
    if (d < unit_dims) {
      g.x[2 + d] = g.w[2 + d] = g.y[2 + d] = 1;
      g.padding[d] = 0;
      g.stride[d] = g.dilation[d] = 1;
      continue;
    }
    const auto e = static_cast<size_t>(d - unit_dims);
    g.x[2 + d] = to_int(s.in[e], 1, "input size");
    g.w[2 + d] = to_int(s.kernel[e], 1, "kernel size");
    g.y[2 + d] = to_int(s.out[e], 1, "output size");
    g.padding[d] = to_int(s.padding[e], 0, "padding");
    g.stride[d] = to_int(s.stride[e], 1, "stride");
    g.dilation[d] = to_int(s.dilation[e], 1, "dilation");
  }
  return g;
}

// cuDNN's name of a chunk's element type.
cudnnDataType_t cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::float32: return CUDNN_DATA_FLOAT;
    case DType::float16: return CUDNN_DATA_HALF;
    case DType::bfloat16: return CUDNN_DATA_BFLOAT16;
  }
  throw std::logic_error("cuda backend: unknown dtype");
}

// Fully packed strides of dims in `layout` (cudnn_descriptors.hpp's packed_strides); also checks
// the element count fits cuDNN's int indexing.
void set_packed_tensor(cudnnTensorDescriptor_t desc, const int* dims, int count, const char* what,
                       cudnnDataType_t type, Layout layout = Layout::channels_first) {
  int strides[5] = {};
  if (packed_strides(dims, count, layout, strides) > std::numeric_limits<int>::max())
    throw std::logic_error(std::string("cuda backend: chunk tensor ") + what + format_dims(dims, count) +
                           " has 2^31 elements or more (the planner must split it further)");
  OOC_CUDNN_CHECK(cudnnSetTensorNdDescriptor(desc, type, count, dims, strides));
}

// The pipeline sized y's slot from the plan; cuDNN must agree, or it would write past the slot.
void check_output_dims(const ConvSetup& s, const CudnnGeometry& g) {
  int out[5] = {};
  OOC_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(s.conv, s.x, s.w, g.tensor_dims, out));
  if (!std::equal(out, out + g.tensor_dims, g.y))
    throw std::logic_error("cuda backend: chunk output " + format_dims(g.y, g.tensor_dims) + " differs from " +
                           format_dims(out, g.tensor_dims) + ", what cuDNN computes for input " +
                           format_dims(g.x, g.tensor_dims) + " and filter " + format_dims(g.w, g.tensor_dims));
}

// OOC_LOG_ALGORITHMS=1: every algorithm choice on stderr (which one, why, what Find measured).
bool log_algorithms() {
  static const bool on = [] {
    const char* v = std::getenv("OOC_LOG_ALGORITHMS");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

std::string describe(const ConvSetup& s, Operation op) {
  int dims[5] = {}, strides[5] = {}, n = 0;
  cudnnDataType_t type;
  std::ostringstream out;
  out << (op == Operation::forward ? "forward" : op == Operation::backward_data ? "backward_data" : "backward_filter");
  if (cudnnGetTensorNdDescriptor(s.x, 5, &type, &n, dims, strides) == CUDNN_STATUS_SUCCESS)
    out << " x" << format_dims(dims, n);
  if (cudnnGetTensorNdDescriptor(s.y, 5, &type, &n, dims, strides) == CUDNN_STATUS_SUCCESS)
    out << " y" << format_dims(dims, n);
  return out.str();
}

// The descriptor's math type. Float32 data: CUDNN_FMA_MATH (full FP32) unless the chunk allows
// TF32, then CUDNN_DEFAULT_MATH, the mode under which cuDNN may run FP32 data as TF32 on tensor
// cores (sm_80 and later; CUDNN_TENSOR_OP_MATH only permits tensor cores without converting the
// data, and torch's allow_tf32 sets DEFAULT likewise). Half data: tensor cores, exact in FP32.
cudnnMathType_t conv_math_type(const ChunkConv& shape) {
  if (shape.dtype != DType::float32) return CUDNN_TENSOR_OP_MATH;
  return shape.math == MathMode::tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

bool uses_tensor_cores(cudnnMathType_t math) {
  return math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// The descriptor's math type an algorithm that cuDNN reported with `reported` runs under: the
// reported one where the setup adopts it (ConvSetup::adopts_algorithm_math), the setup's own otherwise.
cudnnMathType_t run_math(const ConvSetup& s, cudnnMathType_t reported) {
  return s.adopts_algorithm_math ? reported : s.math;
}

// The cuDNN calls that list, size and pick one operation's algorithms, so that one search serves all.
struct ForwardAlgorithms {
  static constexpr Operation op = Operation::forward;
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  using Algo = cudnnConvolutionFwdAlgo_t;
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) { return cudnnGetConvolutionForwardAlgorithmMaxCount(h, n); }
  static cudnnStatus_t heuristics(cudnnHandle_t h, const ConvSetup& s, int requested, int* returned, Perf* results) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, s.x, s.w, s.conv, s.y, requested, returned, results);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvSetup& s, Algo a, size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, s.x, s.w, s.conv, s.y, a, bytes);
  }
  static cudnnStatus_t find(cudnnHandle_t h, const ConvSetup& s, const void* in1, const void* in2, void* out,
                            int requested, int* returned, Perf* results, void* ws, size_t ws_bytes) {
    return cudnnFindConvolutionForwardAlgorithmEx(h, s.x, in1, s.w, in2, s.conv, s.y, out, requested, returned, results,
                                                  ws, ws_bytes);
  }
  static Algo& chosen(ConvSetup& s) { return s.algorithm; }
  static constexpr int count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  // Implicit GEMM needs no workspace and runs every FP32 shape.
  static constexpr std::array<Algo, 1> fallbacks{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM};
};

struct BackwardDataAlgorithms {
  static constexpr Operation op = Operation::backward_data;
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, const ConvSetup& s, int requested, int* returned, Perf* results) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, s.w, s.y, s.conv, s.x, requested, returned, results);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvSetup& s, Algo a, size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, s.w, s.y, s.conv, s.x, a, bytes);
  }
  static cudnnStatus_t find(cudnnHandle_t h, const ConvSetup& s, const void* in1, const void* in2, void* out,
                            int requested, int* returned, Perf* results, void* ws, size_t ws_bytes) {
    return cudnnFindConvolutionBackwardDataAlgorithmEx(h, s.w, in2, s.y, in1, s.conv, s.x, out, requested, returned,
                                                       results, ws, ws_bytes);
  }
  static Algo& chosen(ConvSetup& s) { return s.data_algorithm; }
  static constexpr int count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  // Implicit GEMM (deterministic) where its workspace fits, else the atomic-add sum of products,
  // which needs none.
  static constexpr std::array<Algo, 2> fallbacks{CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0};
};

struct BackwardFilterAlgorithms {
  static constexpr Operation op = Operation::backward_filter;
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, const ConvSetup& s, int requested, int* returned, Perf* results) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, s.x, s.y, s.conv, s.w, requested, returned, results);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvSetup& s, Algo a, size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, s.x, s.y, s.conv, s.w, a, bytes);
  }
  static cudnnStatus_t find(cudnnHandle_t h, const ConvSetup& s, const void* in1, const void* in2, void* out,
                            int requested, int* returned, Perf* results, void* ws, size_t ws_bytes) {
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, s.x, in1, s.y, in2, s.conv, s.w, out, requested, returned,
                                                         results, ws, ws_bytes);
  }
  static Algo& chosen(ConvSetup& s) { return s.filter_algorithm; }
  static constexpr int count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  static constexpr std::array<Algo, 2> fallbacks{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0};
};

bool is_untried(const ConvSetup& s, int algo, cudnnMathType_t math) {
  return std::any_of(s.untried.begin(), s.untried.end(),
                     [&](const AlgorithmCandidate& c) { return c.algo == algo && c.math == math; });
}

// Appends every algorithm of the operation not yet listed, behind the ranked ones: the fixed
// fallbacks first (implicit GEMM needs little or no workspace), then the rest by number. Half data
// also under CUDNN_DEFAULT_MATH, which permits the same tensor cores: cuDNN has refused some
// channels-last kernels under one math type that it runs under the other.
template <typename Algorithms>
void append_every_other(ConvSetup& s) {
  std::vector<cudnnMathType_t> maths{s.math};
  if (s.tensor_cores_allowed && s.math != CUDNN_DEFAULT_MATH) maths.push_back(CUDNN_DEFAULT_MATH);
  for (cudnnMathType_t math : maths) {
    for (typename Algorithms::Algo algo : Algorithms::fallbacks)
      if (!is_untried(s, static_cast<int>(algo), math)) s.untried.push_back({static_cast<int>(algo), math, false, 0});
    for (int algo = 0; algo < Algorithms::count; ++algo)
      if (!is_untried(s, algo, math)) s.untried.push_back({algo, math, false, 0});
  }
}

// Takes the first untried algorithm whose workspace fits the limit: the size cuDNN reports for the
// descriptor as it will run, or a timing's figure where that is larger (a timed figure below the
// size query once made cuDNN refuse a half backward-data chunk for too small a workspace).
// False when none is left.
template <typename Algorithms>
bool take_next(cudnnHandle_t handle, ConvSetup& s, size_t workspace_limit) {
  while (!s.untried.empty()) {
    const AlgorithmCandidate c = s.untried.front();
    s.untried.erase(s.untried.begin());
    const auto algo = static_cast<typename Algorithms::Algo>(c.algo);
    OOC_CUDNN_CHECK(cudnnSetConvolutionMathType(s.conv, c.math));
    size_t needed = 0;
    // A failed size query means cuDNN cannot run this algorithm so, unless a timing just ran it.
    if (Algorithms::workspace(handle, s, algo, &needed) != CUDNN_STATUS_SUCCESS && !c.timed) continue;
    needed = std::max(needed, c.timed_workspace);
    if (needed > workspace_limit) continue;
    Algorithms::chosen(s) = algo;
    s.workspace_bytes = needed;
    return true;
  }
  return false;
}

// The heuristic's ranking, of the algorithms the setup's math type allows, then every other
// algorithm; takes the first whose workspace fits.
template <typename Algorithms>
void choose_algorithm(cudnnHandle_t handle, ConvSetup& s, size_t workspace_limit) {
  int max_count = 0;
  OOC_CUDNN_CHECK(Algorithms::max_count(handle, &max_count));
  std::vector<typename Algorithms::Perf> results(static_cast<size_t>(std::max(max_count, 1)));
  int returned = 0;
  OOC_CUDNN_CHECK(Algorithms::heuristics(handle, s, static_cast<int>(results.size()), &returned, results.data()));
  s.untried.clear();
  for (int i = 0; i < std::min(returned, static_cast<int>(results.size())); ++i) {
    const typename Algorithms::Perf& r = results[static_cast<size_t>(i)];
    if (log_algorithms())
      std::fprintf(stderr, "ooc: %s: heuristic ranks algo %d status %d math %d\n", describe(s, Algorithms::op).c_str(),
                   static_cast<int>(r.algo), static_cast<int>(r.status), static_cast<int>(r.mathType));
    if (r.status != CUDNN_STATUS_SUCCESS || (!s.tensor_cores_allowed && uses_tensor_cores(r.mathType))) continue;
    const cudnnMathType_t math = run_math(s, r.mathType);
    if (!is_untried(s, static_cast<int>(r.algo), math)) s.untried.push_back({static_cast<int>(r.algo), math, false, 0});
  }
  append_every_other<Algorithms>(s);
  if (!take_next<Algorithms>(handle, s, workspace_limit)) {  // nothing fits: the one that needs no workspace
    OOC_CUDNN_CHECK(cudnnSetConvolutionMathType(s.conv, s.math));
    Algorithms::chosen(s) = Algorithms::fallbacks.back();
    s.workspace_bytes = 0;
  }
  if (log_algorithms())
    std::fprintf(stderr, "ooc: %s: algo %d, workspace %zu of %zu, %zu more to fall back on\n",
                 describe(s, Algorithms::op).c_str(), static_cast<int>(Algorithms::chosen(s)), s.workspace_bytes,
                 workspace_limit, s.untried.size());
}

// Times every algorithm the setup's math type allows on these buffers and ranks those that ran, fastest
// first, ahead of every other algorithm; takes the first whose workspace fits. Keeps the current
// choice when none of the timed ones qualifies.
template <typename Algorithms>
void benchmark_algorithm(cudnnHandle_t handle, ConvSetup& s, const void* in1, const void* in2, void* out,
                         void* workspace, size_t workspace_limit) {
  int max_count = 0;
  OOC_CUDNN_CHECK(Algorithms::max_count(handle, &max_count));
  std::vector<typename Algorithms::Perf> results(static_cast<size_t>(std::max(max_count, 1)));
  int returned = 0;
  // Find times what the descriptor's math type allows: the setup's own, not the heuristic pick's
  // adopted one (which may be FMA). The pick's is restored when nothing Find timed qualifies.
  cudnnMathType_t picked_math = s.math;
  OOC_CUDNN_CHECK(cudnnGetConvolutionMathType(s.conv, &picked_math));
  OOC_CUDNN_CHECK(cudnnSetConvolutionMathType(s.conv, s.math));
  OOC_CUDNN_CHECK(Algorithms::find(handle, s, in1, in2, out, static_cast<int>(results.size()), &returned,
                                   results.data(), workspace_limit ? workspace : nullptr, workspace_limit));
  if (log_algorithms()) {
    std::fprintf(stderr, "ooc: %s: find within workspace %zu:", describe(s, Algorithms::op).c_str(), workspace_limit);
    for (int i = 0; i < std::min(returned, static_cast<int>(results.size())); ++i) {
      const typename Algorithms::Perf& r = results[static_cast<size_t>(i)];
      std::fprintf(stderr, " [algo %d status %d math %d %.3f ms %zu B]", static_cast<int>(r.algo),
                   static_cast<int>(r.status), static_cast<int>(r.mathType), r.time, r.memory);
    }
    std::fprintf(stderr, "\n");
  }
  std::vector<AlgorithmCandidate> timed;
  for (int i = 0; i < std::min(returned, static_cast<int>(results.size())); ++i) {  // sorted by time
    const typename Algorithms::Perf& r = results[static_cast<size_t>(i)];
    if (r.status != CUDNN_STATUS_SUCCESS || (!s.tensor_cores_allowed && uses_tensor_cores(r.mathType)) ||
        r.memory > workspace_limit)
      continue;
    timed.push_back({static_cast<int>(r.algo), run_math(s, r.mathType), true, r.memory});
  }
  const auto kept_algo = Algorithms::chosen(s);
  const size_t kept_workspace = s.workspace_bytes;
  std::vector<AlgorithmCandidate> kept_untried = s.untried;
  s.untried = timed;
  append_every_other<Algorithms>(s);
  if (timed.empty() || !take_next<Algorithms>(handle, s, workspace_limit)) {
    Algorithms::chosen(s) = kept_algo;
    s.workspace_bytes = kept_workspace;
    s.untried = std::move(kept_untried);
    OOC_CUDNN_CHECK(cudnnSetConvolutionMathType(s.conv, picked_math));
  }
  if (log_algorithms())
    std::fprintf(stderr, "ooc: %s: chose algo %d, workspace %zu\n", describe(s, Algorithms::op).c_str(),
                 static_cast<int>(Algorithms::chosen(s)), s.workspace_bytes);
  s.benchmarked = true;
}

template <typename Algorithms>
bool fall_back_to(cudnnHandle_t handle, ConvSetup& s, size_t workspace_limit) {
  const auto before = Algorithms::chosen(s);
  if (!take_next<Algorithms>(handle, s, workspace_limit)) return false;
  if (log_algorithms())
    std::fprintf(stderr, "ooc: %s: algo %d refused at run time, falling back on algo %d\n",
                 describe(s, Algorithms::op).c_str(), static_cast<int>(before), static_cast<int>(Algorithms::chosen(s)));
  return true;
}

std::unique_ptr<ConvSetup> make_setup(cudnnHandle_t handle, const ChunkConv& shape, size_t workspace_limit,
                                      Operation op) {
  const CudnnGeometry g = geometry_of(shape);
  auto s = std::make_unique<ConvSetup>();
  const cudnnDataType_t type = cudnn_type(shape.dtype);
  s->tensor_cores_allowed = shape.dtype != DType::float32 || shape.math == MathMode::tf32;
  s->adopts_algorithm_math = shape.dtype == DType::float32 && shape.math == MathMode::tf32;
  s->math = conv_math_type(shape);
  // The chunk's buffers are dense in its layout (ChunkConv::layout); a 1-D chunk's unit H keeps
  // C innermost too. cuDNN's filter format names the weight's layout (NHWC: C/groups innermost).
  set_packed_tensor(s->x, g.x, g.tensor_dims, "x", type, shape.layout);
  set_packed_tensor(s->y, g.y, g.tensor_dims, "y", type, shape.layout);
  const int bias_dims[5] = {1, g.y[1], 1, 1, 1};
  set_packed_tensor(s->bias, bias_dims, g.tensor_dims, "bias", type);
  const cudnnTensorFormat_t filter_format =
      shape.layout == Layout::channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  OOC_CUDNN_CHECK(cudnnSetFilterNdDescriptor(s->w, type, filter_format, g.tensor_dims, g.w));
  set_packed_tensor(s->w_tensor, g.w, g.tensor_dims, "w", type, shape.layout);
  if (shape.out_dtype != shape.dtype) {  // a half backward filter's partial dw and its float32 sum
    set_packed_tensor(s->w_accumulator, g.w, g.tensor_dims, "dw", cudnn_type(shape.out_dtype), shape.layout);
  }
  // Float32 computation for every dtype (half and bfloat16 accumulate in float32).
  OOC_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(s->conv, g.spatial_dims, g.padding, g.stride, g.dilation,
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  OOC_CUDNN_CHECK(cudnnSetConvolutionMathType(s->conv, s->math));
  OOC_CUDNN_CHECK(cudnnSetConvolutionGroupCount(s->conv, g.groups));
  check_output_dims(*s, g);
  switch (op) {
    case Operation::forward: choose_algorithm<ForwardAlgorithms>(handle, *s, workspace_limit); break;
    case Operation::backward_data: choose_algorithm<BackwardDataAlgorithms>(handle, *s, workspace_limit); break;
    case Operation::backward_filter: choose_algorithm<BackwardFilterAlgorithms>(handle, *s, workspace_limit); break;
    case Operation::backward_bias: break;  // a reduction: no algorithm, no workspace
    default: break;  // not a convolution
  }
  return s;
}

}  // namespace

ConvSetupCache::Key ConvSetupCache::key_of(const ChunkConv& s, size_t workspace_limit, Operation op) {
  static_assert(std::tuple_size<Key>::value == 9 + 6 * kMaxSpatial + 2,
                "the key holds every ChunkConv field, the workspace limit and the operation");
  Key key{};
  size_t i = 0;
  key[i++] = static_cast<int64_t>(s.dtype);
  key[i++] = static_cast<int64_t>(s.out_dtype);
  key[i++] = s.spatial_dims;
  key[i++] = s.n;
  key[i++] = s.c;
  key[i++] = s.k;
  key[i++] = s.groups;
  key[i++] = static_cast<int64_t>(s.math);
  key[i++] = static_cast<int64_t>(s.layout);
  for (const Dims3* dims : {&s.in, &s.kernel, &s.stride, &s.padding, &s.dilation, &s.out})
    for (int64_t v : *dims) key[i++] = v;
  key[i++] = static_cast<int64_t>(workspace_limit);
  key[i++] = static_cast<int64_t>(op);
  return key;
}

ConvSetup& ConvSetupCache::get(cudnnHandle_t handle, const ChunkConv& shape, size_t workspace_limit, Operation op) {
  const Key key = key_of(shape, workspace_limit, op);
  auto found = setups_.find(key);
  if (found != setups_.end()) return *found->second;
  auto setup = make_setup(handle, shape, workspace_limit, op);
  return *setups_.emplace(key, std::move(setup)).first->second;
}

void ConvSetupCache::trim() {
  if (setups_.size() >= kMaxCachedSetups) setups_.clear();
}

bool ConvSetupCache::refuses_layout(const ChunkConv& shape, Operation op) const {
  return layout_refusals_.count(key_of(shape, 0, op)) > 0;
}

void ConvSetupCache::refuse_layout(const ChunkConv& shape, Operation op) {
  if (layout_refusals_.size() >= kMaxCachedSetups) layout_refusals_.clear();  // bounded, like the setups
  layout_refusals_.insert(key_of(shape, 0, op));
}

void ConvSetupCache::benchmark(cudnnHandle_t handle, ConvSetup& setup, Operation op, const void* in1,
                               const void* in2, void* out, void* workspace, size_t workspace_limit) {
  switch (op) {
    case Operation::forward:
      benchmark_algorithm<ForwardAlgorithms>(handle, setup, in1, in2, out, workspace, workspace_limit);
      break;
    case Operation::backward_data:
      benchmark_algorithm<BackwardDataAlgorithms>(handle, setup, in1, in2, out, workspace, workspace_limit);
      break;
    case Operation::backward_filter:
      benchmark_algorithm<BackwardFilterAlgorithms>(handle, setup, in1, in2, out, workspace, workspace_limit);
      break;
    case Operation::backward_bias: setup.benchmarked = true; break;
    default:
      break;  // not a convolution
  }
}

bool ConvSetupCache::fall_back(cudnnHandle_t handle, ConvSetup& setup, Operation op, size_t workspace_limit) {
  switch (op) {
    case Operation::forward: return fall_back_to<ForwardAlgorithms>(handle, setup, workspace_limit);
    case Operation::backward_data: return fall_back_to<BackwardDataAlgorithms>(handle, setup, workspace_limit);
    case Operation::backward_filter: return fall_back_to<BackwardFilterAlgorithms>(handle, setup, workspace_limit);
    case Operation::backward_bias: return false;
    default: return false;  // not a convolution
  }
  return false;
}

}  // namespace ooc
