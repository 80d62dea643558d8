# Declarations mirroring libooc's public headers (native/include/ooc/*.hpp); nothing else here.
from libc.stdint cimport int64_t, uintptr_t
from libcpp cimport bool
from libcpp.string cimport string
from libcpp.vector cimport vector


cdef extern from "_errors.hpp" namespace "pyooc":
    cdef void translate_exception()
    cdef void register_error_types(object cuda_error, object cudnn_error)
    cdef void register_cancelled_type(object cancelled_error)


cdef extern from "ooc/problem.hpp" namespace "ooc" nogil:
    cdef enum class DType(int):
        float32
        float16
        bfloat16

    cdef enum class PaddingMode(int):
        zeros
        reflect
        replicate
        circular

    cdef enum class Operation(int):
        forward
        backward_data
        backward_filter
        backward_bias
        matmul
        batchnorm_forward_training
        batchnorm_forward_inference
        batchnorm_backward
        activation_forward
        activation_backward
        softmax_forward
        softmax_backward
        add_tensor
        pool_forward
        pool_backward

    const char* operation_name(Operation op)

    cdef enum class Layout(int):
        channels_first
        channels_last

    cdef cppclass Dims3 "ooc::Dims3":
        int64_t& operator[](size_t)

    cdef cppclass ConvProblem:
        Operation op
        int spatial_dims
        int64_t n, c, k, groups
        Dims3 input "in"
        Dims3 kernel, stride, padding, dilation, out
        DType dtype
        double alpha, beta
        bool has_bias
        Layout layout
        PaddingMode padding_mode

        void set_padding_mode(PaddingMode mode) except +translate_exception

        @staticmethod
        ConvProblem forward(const vector[int64_t]& x_shape, const vector[int64_t]& w_shape,
                            const vector[int64_t]& stride, const vector[int64_t]& padding,
                            const vector[int64_t]& dilation, int64_t groups, double alpha, double beta,
                            bool has_bias, DType dtype, const vector[int64_t]& padding_after) except +translate_exception
        @staticmethod
        ConvProblem backward_data(const vector[int64_t]& dy_shape, const vector[int64_t]& w_shape,
                                  const vector[int64_t]& x_shape, const vector[int64_t]& stride,
                                  const vector[int64_t]& padding, const vector[int64_t]& dilation, int64_t groups,
                                  double alpha, double beta, DType dtype,
                                  const vector[int64_t]& padding_after) except +translate_exception
        @staticmethod
        ConvProblem backward_filter(const vector[int64_t]& x_shape, const vector[int64_t]& dy_shape,
                                    const vector[int64_t]& w_shape, const vector[int64_t]& stride,
                                    const vector[int64_t]& padding, const vector[int64_t]& dilation, int64_t groups,
                                    double alpha, double beta, DType dtype,
                                    const vector[int64_t]& padding_after) except +translate_exception
        @staticmethod
        ConvProblem backward_bias(const vector[int64_t]& dy_shape, double alpha, double beta,
                                  DType dtype) except +translate_exception
        vector[int64_t] x_shape()
        vector[int64_t] w_shape()
        vector[int64_t] y_shape()
        double flops()
        string describe()


cdef extern from "ooc/plan.hpp" namespace "ooc" nogil:
    cdef cppclass Range:
        int64_t begin "begin"
        int64_t end "end"

    cdef cppclass RangeArray3 "std::array<ooc::Range, 3>":
        Range& operator[](size_t)

    cdef cppclass Tiling:
        int64_t n, k, c, g
        Dims3 out

    cdef enum class LoopOrder(int):
        k_outer
        ns_outer

    const char* loop_order_name(LoopOrder)

    cdef cppclass Chunk:
        Range n, k, c
        RangeArray3 out
        RangeArray3 input "in"
        RangeArray3 target
        RangeArray3 out_read
        Dims3 compute_padding
        bool load_x, load_w, load_y, first_c, last_c

    cdef enum class ChunkMember(int):
        n

    cdef cppclass ChunkField:
        const char* name
        ChunkMember member

    cdef enum class SlotKind(int):
        streamed
        kept
        scratch

    const char* slot_kind_name(SlotKind kind)

    cdef cppclass SlotPlan:
        string name
        SlotKind kind
        int buffers
        size_t bytes, offset

    cdef cppclass MachineModel:
        double h2d_bytes_per_s, d2h_bytes_per_s, bidir_bytes_per_s, flops_per_s, chunk_overhead_s
        double host_copy_bytes_per_s, chunk_half_flops
        bool copies_share_compute

    cdef cppclass CandidateSummary:
        double predicted_seconds
        size_t peak_device_bytes
        double chunks

    cdef cppclass Plan:
        ConvProblem problem
        string backend
        MathMode math
        Tiling tiling
        int64_t splits_g, splits_n, splits_k, splits_c
        Dims3 splits_out
        LoopOrder order
        int buffers, x_buffers, w_buffers, y_buffers, bias_buffers
        bool w_resident
        size_t x_slot_bytes, w_slot_bytes, y_slot_bytes, bias_bytes, workspace_bytes
        size_t peak_device_bytes, memory_limit, bytes_h2d, bytes_d2h
        double predicted_seconds
        int passes
        MachineModel machine
        vector[Chunk] chunks
        vector[SlotPlan] slots
        string fused
        int y_inputs, pooled_inputs, out_buffers
        size_t pooled_slot_bytes, out_slot_bytes, kept_bytes, scratch_bytes
        vector[CandidateSummary] candidates
        int64_t candidates_fitting
        size_t num_chunks()
        vector[ChunkField] chunk_fields()
        string describe()


cdef extern from "<atomic>" namespace "std" nogil:
    cdef cppclass atomic_bool "std::atomic<bool>":
        void store(bool value)
        bool load()


cdef extern from "ooc/ooc.hpp" namespace "ooc" nogil:
    cdef enum class MathMode(int):
        fp32
        tf32

    cdef enum class BackendKind(int):
        automatic
        host
        cuda

    cdef cppclass ChunkProgress:
        int64_t done, total
        double predicted_seconds

    cdef cppclass CallObserver:
        const atomic_bool* cancel
        bool (*on_chunk)(void* context, const ChunkProgress* progress) noexcept nogil
        void* context

    cdef cppclass Options:
        size_t memory_limit
        BackendKind backend
        int device
        vector[int] devices
        bool assume_pinned
        const CallObserver* observer
        const MachineModel* machine
        MathMode math

    cdef cppclass RunStats:
        size_t bytes_h2d, bytes_d2h, device_bytes_reserved
        int64_t chunks
        double seconds, gather_seconds, scatter_seconds, host_wait_seconds, pace_wait_seconds
        double h2d_busy_seconds, compute_busy_seconds, d2h_busy_seconds

    ctypedef void (*PlanObserver)(const Plan& plan, bool automatic_chose_host)
    void set_plan_observer(PlanObserver observer)
    void set_default_memory_limit(size_t bytes)
    size_t default_memory_limit()
    int device_count()
    int cudnn_version_runtime()
    int cudnn_version_build()
    int cuda_runtime_version()
    string cudnn_library_path() except +translate_exception

    Plan plan_conv_forward(const ConvProblem& problem, const Options& options) except +translate_exception
    Plan plan_conv_backward_data(const ConvProblem& problem, const Options& options) except +translate_exception
    Plan plan_conv_backward_filter(const ConvProblem& problem, const Options& options) except +translate_exception
    Plan plan_conv_backward_bias(const ConvProblem& problem, const Options& options) except +translate_exception
    void conv_forward(const ConvProblem& problem, const void* x, const void* w, const void* bias, void* y,
                      const Options& options, Plan* used, RunStats* stats) except +translate_exception
    void conv_backward_data(const ConvProblem& problem, const void* dy, const void* w, void* dx,
                            const Options& options, Plan* used, RunStats* stats) except +translate_exception
    void conv_backward_filter(const ConvProblem& problem, const void* x, const void* dy, void* dw,
                              const Options& options, Plan* used, RunStats* stats) except +translate_exception
    void conv_backward_bias(const ConvProblem& problem, const void* dy, void* db, const Options& options,
                            Plan* used, RunStats* stats) except +translate_exception
    cdef cppclass LinkBandwidth:
        double h2d, d2h, bidir

    LinkBandwidth measure_link_bandwidth(int device, size_t nbytes) except +translate_exception
    void* alloc_pinned(size_t bytes) except +translate_exception
    void free_pinned(void* ptr)
    void register_pinned(void* ptr, size_t bytes) except +translate_exception
    void unregister_pinned(void* ptr) except +translate_exception
    int device_memory_ordinal(const void* ptr)
    void wait_for_stream(uintptr_t stream, int device) except +translate_exception


cdef extern from "ooc/layers.hpp" namespace "ooc" nogil:
    ConvProblem matmul_problem(const vector[int64_t]& a_shape, const vector[int64_t]& b_shape, double alpha,
                               double beta, bool has_bias, DType dtype) except +translate_exception
    Plan plan_matmul(const ConvProblem& problem, const Options& options) except +translate_exception
    void matmul(const ConvProblem& problem, bool trans_a, bool trans_b, const void* a, const void* b,
                const void* bias, void* c, const Options& options, Plan* used,
                RunStats* stats) except +translate_exception
    ConvProblem batchnorm_problem(Operation op, const vector[int64_t]& x_shape,
                                  DType dtype) except +translate_exception
    Plan plan_batchnorm(const ConvProblem& problem, const Options& options) except +translate_exception
    void batchnorm_forward_training(const ConvProblem& problem, const void* x, const float* scale,
                                    const float* bias, double eps, double momentum, float* running_mean,
                                    float* running_var, void* y, float* saved_mean, float* saved_invstd,
                                    const Options& options, Plan* used, RunStats* stats) except +translate_exception
    void batchnorm_forward_inference(const ConvProblem& problem, const void* x, const float* scale,
                                     const float* bias, const float* mean, const float* var, double eps, void* y,
                                     const Options& options, Plan* used, RunStats* stats) except +translate_exception
    void batchnorm_backward(const ConvProblem& problem, const void* x, const void* dy, const float* scale,
                            const float* saved_mean, const float* saved_invstd, void* dx, float* dscale,
                            float* dbias, const Options& options, Plan* used,
                            RunStats* stats) except +translate_exception
    cdef enum class ActivationMode(int):
        relu
    cdef cppclass ActivationTraits:
        const char* coef_name
        double coef_default
        bint gradient_from_y
    ActivationTraits activation_traits(ActivationMode mode)
    cdef enum class SoftmaxMode(int):
        channel

    cdef enum class PoolMode(int):
        max
    PoolMode pool_mode_from_name(const string& name) except +translate_exception
    ConvProblem pool_problem(const vector[int64_t]& x_shape, const vector[int64_t]& kernel,
                             const vector[int64_t]& stride, const vector[int64_t]& padding,
                             DType dtype) except +translate_exception
    Plan plan_pool_forward(const ConvProblem& problem, const Options& options) except +translate_exception
    void pool_forward(const ConvProblem& problem, PoolMode mode, const void* x, void* y, const Options& options,
                      Plan* used, RunStats* stats) except +translate_exception
    ConvProblem pool_backward_problem(const ConvProblem& forward) except +translate_exception
    Plan plan_pool_backward(const ConvProblem& problem, const Options& options) except +translate_exception
    void pool_backward(const ConvProblem& problem, PoolMode mode, const void* y, const void* dy, const void* x,
                       void* dx, const Options& options, Plan* used, RunStats* stats) except +translate_exception
    ActivationMode activation_mode_from_name(const string& name) except +translate_exception
    SoftmaxMode softmax_mode_from_name(const string& name) except +translate_exception
    Plan plan_activation_forward(const vector[int64_t]& shape, const Options& options,
                                 DType dtype) except +translate_exception
    Plan plan_activation_backward(const vector[int64_t]& shape, ActivationMode mode,
                                  const Options& options, DType dtype) except +translate_exception
    Plan plan_softmax_forward(const vector[int64_t]& shape, SoftmaxMode mode,
                              const Options& options, DType dtype) except +translate_exception
    Plan plan_softmax_backward(const vector[int64_t]& shape, SoftmaxMode mode,
                               const Options& options, DType dtype) except +translate_exception
    Plan plan_add_tensor(const vector[int64_t]& a_shape, const vector[int64_t]& c_shape, bool in_place,
                         const Options& options, DType dtype) except +translate_exception
    void activation_forward(const vector[int64_t]& shape, ActivationMode mode, double coef, const void* x, void* y,
                            const Options& options, Plan* used, RunStats* stats, double alpha, double beta,
                            DType dtype) except +translate_exception
    void activation_backward(const vector[int64_t]& shape, ActivationMode mode, double coef, const void* y,
                             const void* dy, const void* x, void* dx, const Options& options, Plan* used,
                             RunStats* stats, double alpha, double beta, DType dtype) except +translate_exception
    void softmax_forward(const vector[int64_t]& shape, SoftmaxMode mode, bool log, const void* x, void* y,
                         const Options& options, Plan* used, RunStats* stats, double alpha, double beta,
                         DType dtype) except +translate_exception
    void softmax_backward(const vector[int64_t]& shape, SoftmaxMode mode, bool log, const void* y, const void* dy,
                          void* dx, const Options& options, Plan* used, RunStats* stats, double alpha, double beta,
                          DType dtype) except +translate_exception
    void add_tensor(const vector[int64_t]& a_shape, const vector[int64_t]& c_shape, double alpha, const void* a,
                    double beta, const void* c, void* out, const Options& options, Plan* used,
                    RunStats* stats, DType dtype) except +translate_exception


cdef extern from "ooc/fused.hpp" namespace "ooc" nogil:
    cdef cppclass FusedActivation:
        bool identity
        ActivationMode mode
        double coef

    FusedActivation fused_activation_from_name(const string& name, double coef) except +translate_exception
    Plan plan_conv_bias_activation_forward(const ConvProblem& problem, const Options& options) except +translate_exception
    void conv_bias_activation_forward(const ConvProblem& problem, const FusedActivation& activation, const void* x,
                                      const void* w, const void* z, const void* bias, void* y,
                                      const Options& options, Plan* used, RunStats* stats) except +translate_exception
    ConvProblem deconv_problem(const vector[int64_t]& x_shape, const vector[int64_t]& w_shape,
                               const vector[int64_t]& stride, const vector[int64_t]& padding,
                               const vector[int64_t]& output_padding, const vector[int64_t]& dilation, int64_t groups,
                               double alpha1, double alpha2, bool has_bias, DType dtype) except +translate_exception
    Plan plan_deconv_bias_activation_forward(const ConvProblem& deconv,
                                             const Options& options) except +translate_exception
    void deconv_bias_activation_forward(const ConvProblem& deconv, const FusedActivation& activation,
                                        const void* x, const void* w, const void* z, const void* bias, void* y,
                                        const Options& options, Plan* used,
                                        RunStats* stats) except +translate_exception
    Plan plan_conv_bias_activation_pooling_forward(const ConvProblem& conv, const ConvProblem& pool,
                                                   const Options& options) except +translate_exception
    void conv_bias_activation_pooling_forward(const ConvProblem& conv, const FusedActivation& activation,
                                              const ConvProblem& pool, PoolMode mode, const void* x,
                                              const void* w, const void* z, const void* bias, void* out,
                                              const Options& options, Plan* used,
                                              RunStats* stats) except +translate_exception
    Plan plan_conv_backward_data_filter_bias(const ConvProblem& problem,
                                             const Options& options) except +translate_exception
    void conv_backward_data_filter_bias(const ConvProblem& problem, const void* x, const void* dy, const void* w,
                                        void* dx, void* dw, void* db, const Options& options, Plan* used,
                                        RunStats* stats) except +translate_exception
    Plan plan_pooling_activation_conv_backward_data_filter_bias(const ConvProblem& problem,
                                                                const FusedActivation& activation,
                                                                const ConvProblem& pool, bool with_pre,
                                                                const Options& options) except +translate_exception
    void pooling_activation_conv_backward_data_filter_bias(const ConvProblem& problem,
                                                           const FusedActivation& activation,
                                                           const ConvProblem& pool, PoolMode mode, const void* x,
                                                           const void* dq, const void* w, const void* q,
                                                           const void* y, const void* pre, void* dx, void* dw,
                                                           void* db, const Options& options, Plan* used,
                                                           RunStats* stats) except +translate_exception
    Plan plan_activation_conv_backward_data_filter_bias(const ConvProblem& problem,
                                                        const FusedActivation& activation, bool with_pre,
                                                        const Options& options) except +translate_exception
    void activation_conv_backward_data_filter_bias(const ConvProblem& problem, const FusedActivation& activation,
                                                   const void* x, const void* dy, const void* w, const void* y,
                                                   const void* pre, void* dx, void* dw, void* db,
                                                   const Options& options, Plan* used,
                                                   RunStats* stats) except +translate_exception


cdef extern from "ooc/ooc.hpp" namespace "ooc::testing" nogil:
    void inject_fault(const string& where, int64_t countdown) except +translate_exception
    void set_host_direct_access(bool enabled)
