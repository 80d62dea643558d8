// The network of small_cnn.hpp: its descriptors and buffers, one SGD step (forward, loss, backward,
// update) as ooc_ calls, the synthetic data, and the training loop.
#include "small_cnn.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

// --- error checks ------------------------------------------------------------------------------

namespace {

// libooc's reason for the calling thread's last failed ooc_ call ("" after a success).
std::string ooc_reason() {
  char why[1024] = {};
  oocGetLastErrorString(why, sizeof why);
  return why[0] ? std::string(": ") + why : std::string();
}

}  // namespace

void check(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw ApiError(std::string(call) + " failed with " + cudnnGetErrorString(status) + ooc_reason());
}

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw ApiError(std::string(call) + " failed with " + cublasGetStatusName(status) + ooc_reason());
}

void check(cudaError_t status, const char* call) {
  // cudaGetErrorName would pull in the CUDA runtime; the number and libooc's reason say enough.
  if (status != cudaSuccess)
    throw ApiError(std::string(call) + " failed with cudaError_t " + std::to_string(static_cast<int>(status)) +
                   ooc_reason());
}

namespace {

// --- descriptors and buffers, freed by their destructors ---------------------------------------

template <typename Descriptor, cudnnStatus_t (*Destroy)(Descriptor)>
struct Destroyer {
  void operator()(Descriptor d) const { (void)Destroy(d); }
};
template <typename Descriptor, cudnnStatus_t (*Destroy)(Descriptor)>
using Owned = std::unique_ptr<std::remove_pointer_t<Descriptor>, Destroyer<Descriptor, Destroy>>;

using TensorDesc = Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDesc = Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvDesc = Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
using ActivationDesc = Owned<cudnnActivationDescriptor_t, cudnnDestroyActivationDescriptor>;
using PoolingDesc = Owned<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor>;

TensorDesc tensor4d(int n, int c, int h, int w) {
  cudnnTensorDescriptor_t d = nullptr;
  CHECK(cudnnCreateTensorDescriptor(&d));
  TensorDesc owned(d);
  CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  return owned;
}

// floats from ooc_cudaMalloc: on the device while it has room, else in pinned host memory.
class Buffer {
 public:
  explicit Buffer(size_t count) : count_(count) {
    void* p = nullptr;
    CHECK(ooc_cudaMalloc(&p, count * sizeof(float)));
    data_ = static_cast<float*>(p);
  }
  ~Buffer() { (void)ooc_cudaFree(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  float* get() const { return data_; }
  void upload(const std::vector<float>& host) {
    CHECK(ooc_cudaMemcpy(data_, host.data(), count_ * sizeof(float), cudaMemcpyHostToDevice));
  }
  void download(std::vector<float>& host) const {
    host.resize(count_);
    CHECK(ooc_cudaMemcpy(host.data(), data_, count_ * sizeof(float), cudaMemcpyDeviceToHost));
  }
  void zero() { CHECK(ooc_cudaMemset(data_, 0, count_ * sizeof(float))); }

 private:
  size_t count_;
  float* data_ = nullptr;
};

// --- synthetic data ----------------------------------------------------------------------------

constexpr int kClasses = 4;

// Class c's image has a Gaussian blob somewhere in quadrant c (0 top left, 1 top right, 2 bottom
// left, 3 bottom right) on noise: the network must learn where bright pixels are.
void make_batch(std::mt19937& rng, int n, int size, std::vector<float>& images, std::vector<int>& labels) {
  const int half = size / 2;
  const float sigma = size / 12.0f;
  std::uniform_int_distribution<int> label_of(0, kClasses - 1);
  std::uniform_real_distribution<float> offset(0.25f * half, 0.75f * half);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  images.resize(static_cast<size_t>(n) * size * size);
  labels.resize(n);
  for (int i = 0; i < n; ++i) {
    const int label = label_of(rng);
    labels[i] = label;
    const float cy = (label / 2) * half + offset(rng), cx = (label % 2) * half + offset(rng);
    float* image = &images[static_cast<size_t>(i) * size * size];
    for (int y = 0; y < size; ++y)
      for (int x = 0; x < size; ++x) {
        const float r2 = (y - cy) * (y - cy) + (x - cx) * (x - cx);
        image[y * size + x] = std::exp(-r2 / (2 * sigma * sigma)) + noise(rng);
      }
  }
}

std::vector<float> normal_weights(std::mt19937& rng, size_t count, float stddev) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> w(count);
  for (float& v : w) v = normal(rng);
  return w;
}

// --- the network -------------------------------------------------------------------------------

struct StepResult {
  float loss;
  int correct;
};

class SmallCnn {
 public:
  SmallCnn(cudnnHandle_t cudnn, cublasHandle_t cublas, const TrainOptions& o, std::mt19937& rng);

  // One SGD step on the batch; `report` prints what each call of the step ran.
  StepResult step(const std::vector<float>& images, const std::vector<int>& labels, bool report);

  oocPlanInfo_t conv_forward_plan{};  // of the last step

 private:
  void forward(bool report);
  StepResult loss_and_gradient(const std::vector<int>& labels);
  void backward(bool report);
  void update(bool report);

  cudnnHandle_t cudnn_;
  cublasHandle_t cublas_;
  const int n_, size_, channels_, pooled_size_, features_;  // features_: the FC layer's inputs per image
  const float learning_rate_;

  TensorDesc x_desc_, conv_out_desc_, bias_desc_, pooled_desc_, logits_desc_, fc_bias_desc_;
  TensorDesc conv_w_as_tensor_, fc_w_as_tensor_;  // for the SGD update (cudnnAddTensor)
  FilterDesc conv_w_desc_;
  ConvDesc conv_desc_;
  ActivationDesc relu_;
  PoolingDesc pool_;

  // Allocated in this order: the small buffers first, so that they take the device memory the
  // allocation limit leaves and the activations (the large ones) go to pinned host memory.
  Buffer conv_w_, conv_b_, fc_w_, fc_b_;                 // parameters
  Buffer d_conv_w_, d_conv_b_, d_fc_w_, d_fc_b_;         // their gradients
  Buffer x_, logits_, log_probs_, d_log_probs_, d_logits_;
  Buffer conv_out_, relu_out_, pooled_, d_pooled_, d_relu_;  // [N, C, S, S] and [N, C, S/2, S/2]
};

SmallCnn::SmallCnn(cudnnHandle_t cudnn, cublasHandle_t cublas, const TrainOptions& o, std::mt19937& rng)
    : cudnn_(cudnn),
      cublas_(cublas),
      n_(o.batch),
      size_(o.image),
      channels_(o.channels),
      pooled_size_(o.image / 2),
      features_(o.channels * pooled_size_ * pooled_size_),
      learning_rate_(o.learning_rate),
      x_desc_(tensor4d(n_, 1, size_, size_)),
      conv_out_desc_(tensor4d(n_, channels_, size_, size_)),
      bias_desc_(tensor4d(1, channels_, 1, 1)),
      pooled_desc_(tensor4d(n_, channels_, pooled_size_, pooled_size_)),
      logits_desc_(tensor4d(n_, kClasses, 1, 1)),
      fc_bias_desc_(tensor4d(1, kClasses, 1, 1)),
      conv_w_as_tensor_(tensor4d(channels_, 1, 3, 3)),
      fc_w_as_tensor_(tensor4d(kClasses, features_, 1, 1)),
      conv_w_(static_cast<size_t>(channels_) * 9),
      conv_b_(channels_),
      fc_w_(static_cast<size_t>(kClasses) * features_),
      fc_b_(kClasses),
      d_conv_w_(static_cast<size_t>(channels_) * 9),
      d_conv_b_(channels_),
      d_fc_w_(static_cast<size_t>(kClasses) * features_),
      d_fc_b_(kClasses),
      x_(static_cast<size_t>(n_) * size_ * size_),
      logits_(static_cast<size_t>(n_) * kClasses),
      log_probs_(static_cast<size_t>(n_) * kClasses),
      d_log_probs_(static_cast<size_t>(n_) * kClasses),
      d_logits_(static_cast<size_t>(n_) * kClasses),
      conv_out_(static_cast<size_t>(n_) * channels_ * size_ * size_),
      relu_out_(static_cast<size_t>(n_) * channels_ * size_ * size_),
      pooled_(static_cast<size_t>(n_) * features_),
      d_pooled_(static_cast<size_t>(n_) * features_),
      d_relu_(static_cast<size_t>(n_) * channels_ * size_ * size_) {
  if (size_ % 2 != 0) throw std::invalid_argument("the image size must be even (2x2 pooling)");
  cudnnFilterDescriptor_t w = nullptr;
  CHECK(cudnnCreateFilterDescriptor(&w));
  conv_w_desc_.reset(w);
  CHECK(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, channels_, 1, 3, 3));

  cudnnConvolutionDescriptor_t conv = nullptr;
  CHECK(cudnnCreateConvolutionDescriptor(&conv));
  conv_desc_.reset(conv);
  CHECK(cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  int on, oc, oh, ow;  // "same" padding: the output is the input's size
  CHECK(cudnnGetConvolution2dForwardOutputDim(conv, x_desc_.get(), w, &on, &oc, &oh, &ow));
  if (on != n_ || oc != channels_ || oh != size_ || ow != size_)
    throw std::logic_error("unexpected convolution output shape");

  cudnnActivationDescriptor_t relu = nullptr;
  CHECK(cudnnCreateActivationDescriptor(&relu));
  relu_.reset(relu);
  CHECK(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));

  cudnnPoolingDescriptor_t pool = nullptr;
  CHECK(cudnnCreatePoolingDescriptor(&pool));
  pool_.reset(pool);
  CHECK(cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));

  // He initialization for the conv (9 inputs per output, relu after), 1/sqrt(fan-in) for the FC.
  conv_w_.upload(normal_weights(rng, static_cast<size_t>(channels_) * 9, std::sqrt(2.0f / 9)));
  fc_w_.upload(normal_weights(rng, static_cast<size_t>(kClasses) * features_, 1.0f / std::sqrt(float(features_))));
  conv_b_.zero();
  fc_b_.zero();
}

// Prints what the last ooc_ call ran: cuDNN or cuBLAS directly (all its tensors on the device within
// the memory limit), or chunks streamed through the memory limit.
void print_plan(const char* what) {
  oocPlanInfo_t info{};
  CHECK(oocGetLastPlanInfo(&info));
  if (!info.outOfCore) {
    std::printf("  %-26s direct call (every tensor on the device)\n", what);
    return;
  }
  std::printf("  %-26s %3lld chunks, peak %7.1f KiB on the device, %7.1f KiB in, %7.1f KiB out\n", what,
              info.chunks, info.peakDeviceBytes / 1024.0, info.bytesH2D / 1024.0, info.bytesD2H / 1024.0);
}

StepResult SmallCnn::step(const std::vector<float>& images, const std::vector<int>& labels, bool report) {
  x_.upload(images);
  forward(report);
  const StepResult result = loss_and_gradient(labels);
  backward(report);
  update(report);
  return result;
}

void SmallCnn::forward(bool report) {
  const float one = 1.0f, zero = 0.0f;
  // Out of core, algo and workspace are ignored (each chunk picks its own); in core, IMPLICIT_GEMM
  // needs no workspace.
  CHECK(ooc_cudnnConvolutionForward(cudnn_, &one, x_desc_.get(), x_.get(), conv_w_desc_.get(), conv_w_.get(),
                                    conv_desc_.get(), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero,
                                    conv_out_desc_.get(), conv_out_.get()));
  CHECK(oocGetLastPlanInfo(&conv_forward_plan));
  if (report) {
    const size_t length = oocGetLastPlanDescription(nullptr, 0);
    std::string plan(length + 1, '\0');
    oocGetLastPlanDescription(plan.data(), plan.size());
    plan.resize(length);
    std::printf("first step, ooc_cudnnConvolutionForward's plan:\n%s\nfirst step, call by call:\n", plan.c_str());
    print_plan("conv forward");
  }
  CHECK(ooc_cudnnAddTensor(cudnn_, &one, bias_desc_.get(), conv_b_.get(), &one, conv_out_desc_.get(), conv_out_.get()));
  if (report) print_plan("conv bias");
  CHECK(ooc_cudnnActivationForward(cudnn_, relu_.get(), &one, conv_out_desc_.get(), conv_out_.get(), &zero,
                                   conv_out_desc_.get(), relu_out_.get()));
  if (report) print_plan("relu forward");
  CHECK(ooc_cudnnPoolingForward(cudnn_, pool_.get(), &one, conv_out_desc_.get(), relu_out_.get(), &zero,
                                pooled_desc_.get(), pooled_.get()));
  if (report) print_plan("max pool forward");
  // Row-major logits[N, 4] = pooled[N, F] * fc_w[4, F]^T is column-major logits^T = fc_w * pooled^T.
  CHECK(ooc_cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, kClasses, n_, features_, &one, fc_w_.get(), features_,
                        pooled_.get(), features_, &zero, logits_.get(), kClasses));
  if (report) print_plan("fully connected (SGEMM)");
  CHECK(ooc_cudnnAddTensor(cudnn_, &one, fc_bias_desc_.get(), fc_b_.get(), &one, logits_desc_.get(), logits_.get()));
  if (report) print_plan("fully connected bias");
  CHECK(ooc_cudnnSoftmaxForward(cudnn_, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_CHANNEL, &one, logits_desc_.get(),
                                logits_.get(), &zero, logits_desc_.get(), log_probs_.get()));
  if (report) print_plan("log-softmax forward");
}

// Cross-entropy of the log-probabilities (a few floats, on the host), and its gradient
// d loss / d log_probs = -onehot(label) / N for log-softmax's backward.
StepResult SmallCnn::loss_and_gradient(const std::vector<int>& labels) {
  std::vector<float> log_probs;
  log_probs_.download(log_probs);
  std::vector<float> gradient(log_probs.size(), 0.0f);
  StepResult r{0.0f, 0};
  for (int i = 0; i < n_; ++i) {
    const float* row = &log_probs[static_cast<size_t>(i) * kClasses];
    r.loss -= row[labels[i]] / n_;
    int best = 0;
    for (int c = 1; c < kClasses; ++c)
      if (row[c] > row[best]) best = c;
    r.correct += best == labels[i];
    gradient[static_cast<size_t>(i) * kClasses + labels[i]] = -1.0f / n_;
  }
  d_log_probs_.upload(gradient);
  return r;
}

void SmallCnn::backward(bool report) {
  const float one = 1.0f, zero = 0.0f;
  CHECK(ooc_cudnnSoftmaxBackward(cudnn_, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_CHANNEL, &one, logits_desc_.get(),
                                 log_probs_.get(), logits_desc_.get(), d_log_probs_.get(), &zero, logits_desc_.get(),
                                 d_logits_.get()));
  if (report) print_plan("log-softmax backward");
  // The bias gradient sums d_logits over the batch, as a convolution's does over N and space.
  CHECK(ooc_cudnnConvolutionBackwardBias(cudnn_, &one, logits_desc_.get(), d_logits_.get(), &zero,
                                         fc_bias_desc_.get(), d_fc_b_.get()));
  if (report) print_plan("fully connected d bias");
  // d_fc_w[4, F] = d_logits^T * pooled: column-major d_fc_w^T = pooled^T * d_logits.
  CHECK(ooc_cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, features_, kClasses, n_, &one, pooled_.get(), features_,
                        d_logits_.get(), kClasses, &zero, d_fc_w_.get(), features_));
  if (report) print_plan("fully connected d weight");
  // d_pooled[N, F] = d_logits * fc_w: column-major d_pooled^T = fc_w^T * d_logits^T.
  CHECK(ooc_cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, features_, n_, kClasses, &one, fc_w_.get(), features_,
                        d_logits_.get(), kClasses, &zero, d_pooled_.get(), features_));
  if (report) print_plan("fully connected d input");
  CHECK(ooc_cudnnPoolingBackward(cudnn_, pool_.get(), &one, pooled_desc_.get(), pooled_.get(), pooled_desc_.get(),
                                 d_pooled_.get(), conv_out_desc_.get(), relu_out_.get(), &zero, conv_out_desc_.get(),
                                 d_relu_.get()));
  if (report) print_plan("max pool backward");
  // In place: d_relu becomes the gradient of the conv output.
  CHECK(ooc_cudnnActivationBackward(cudnn_, relu_.get(), &one, conv_out_desc_.get(), relu_out_.get(),
                                    conv_out_desc_.get(), d_relu_.get(), conv_out_desc_.get(), conv_out_.get(), &zero,
                                    conv_out_desc_.get(), d_relu_.get()));
  if (report) print_plan("relu backward");
  CHECK(ooc_cudnnConvolutionBackwardBias(cudnn_, &one, conv_out_desc_.get(), d_relu_.get(), &zero, bias_desc_.get(),
                                         d_conv_b_.get()));
  if (report) print_plan("conv d bias");
  // The first layer needs no input gradient (no ConvolutionBackwardData). ALGO_0 needs no workspace.
  CHECK(ooc_cudnnConvolutionBackwardFilter(cudnn_, &one, x_desc_.get(), x_.get(), conv_out_desc_.get(), d_relu_.get(),
                                           conv_desc_.get(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, nullptr, 0, &zero,
                                           conv_w_desc_.get(), d_conv_w_.get()));
  if (report) print_plan("conv d weight");
}

// SGD: parameter += -learning_rate * gradient, by cudnnAddTensor (C = alpha * A + beta * C).
void SmallCnn::update(bool report) {
  const float step = -learning_rate_, one = 1.0f;
  CHECK(ooc_cudnnAddTensor(cudnn_, &step, conv_w_as_tensor_.get(), d_conv_w_.get(), &one, conv_w_as_tensor_.get(),
                           conv_w_.get()));
  CHECK(ooc_cudnnAddTensor(cudnn_, &step, bias_desc_.get(), d_conv_b_.get(), &one, bias_desc_.get(), conv_b_.get()));
  CHECK(ooc_cudnnAddTensor(cudnn_, &step, fc_w_as_tensor_.get(), d_fc_w_.get(), &one, fc_w_as_tensor_.get(),
                           fc_w_.get()));
  CHECK(ooc_cudnnAddTensor(cudnn_, &step, fc_bias_desc_.get(), d_fc_b_.get(), &one, fc_bias_desc_.get(), fc_b_.get()));
  if (report) print_plan("SGD update (last of 4)");
}

}  // namespace

TrainResult train_small_cnn(cudnnHandle_t cudnn, cublasHandle_t cublas, const TrainOptions& o) {
  if (o.batch < 1 || o.image < 2 || o.channels < 1 || o.steps < o.average_over || o.average_over < 1)
    throw std::invalid_argument("train_small_cnn: batch, image, channels and average_over must be positive, "
                                "and steps at least average_over");
  std::mt19937 rng(o.seed);
  SmallCnn net(cudnn, cublas, o, rng);
  std::vector<float> images;
  std::vector<int> labels;
  TrainResult result;
  double loss_sum = 0, correct_sum = 0;
  const auto start = std::chrono::steady_clock::now();
  auto timed_start = start;
  double data_seconds = 0;
  for (int s = 0; s < o.steps; ++s) {
    const auto data_start = std::chrono::steady_clock::now();
    make_batch(rng, o.batch, o.image, images, labels);  // a fresh batch every step
    if (s > 0) data_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - data_start).count();
    const StepResult r = net.step(images, labels, s == 0 && o.print_every > 0);
    if (s == 0) {
      result.first_loss = r.loss;
      result.first_conv_forward = net.conv_forward_plan;
      oocResetTotals();
      timed_start = std::chrono::steady_clock::now();
    }
    if (s >= o.steps - o.average_over) {
      loss_sum += r.loss;
      correct_sum += r.correct;
    }
    if (o.print_every > 0 && (s % o.print_every == 0 || s == o.steps - 1)) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("step %4d  loss %.4f  accuracy %5.1f%%  (%.1f s)\n", s, r.loss, 100.0 * r.correct / o.batch,
                  seconds);
      std::fflush(stdout);
    }
  }
  // Every step ends by reading its loss on the host after the update was issued; the next step's
  // reads wait for it, so the last step's update is the only work outside the clock.
  result.timed_steps = o.steps - 1;
  if (result.timed_steps > 0) {
    result.seconds_per_step =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - timed_start).count() / result.timed_steps;
    result.data_seconds_per_step = data_seconds / result.timed_steps;
    CHECK(oocGetTotals(&result.timed_totals));
  }
  result.final_loss = static_cast<float>(loss_sum / o.average_over);
  result.final_accuracy = static_cast<float>(correct_sum / (double(o.average_over) * o.batch));
  return result;
}
