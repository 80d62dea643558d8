#include "exec/conv_pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <vector>

#include "exec/device_arena.hpp"
#include "exec/region_copy.hpp"

namespace ooc {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Owns backend events and host staging buffers; drains the queues before releasing them, on every path.
class PipelineResources {
 public:
  explicit PipelineResources(Backend& b) : backend_(b) {}
  ~PipelineResources() {
    backend_.synchronize();
    for (auto e : events_) backend_.destroy_event(e);
    for (auto p : staging_) backend_.staging_free(p);
  }
  Backend::Event event() {
    events_.push_back(backend_.create_event());
    return events_.back();
  }
  std::vector<Backend::Event> events(int n) {
    std::vector<Backend::Event> v;
    for (int i = 0; i < n; ++i) v.push_back(event());
    return v;
  }
  void* staging(size_t bytes) {
    staging_.push_back(backend_.staging_alloc(bytes));
    return staging_.back();
  }

 private:
  Backend& backend_;
  std::vector<Backend::Event> events_;
  std::vector<void*> staging_;
};

// A ring of device slots for one tensor with the events that guard them.
struct SlotRing {
  std::vector<void*> slots;
  std::vector<Backend::Event> ready, free;  // ready: loaded (H2D); free: last compute using it done
  int next = 0, current = -1;
  int advance() {
    current = next;
    next = (next + 1) % static_cast<int>(slots.size());
    return current;
  }
};

Box x_box(const Chunk& ch) {
  Box b;
  b.lo = {ch.n.begin, ch.c.begin, ch.in[0].begin, ch.in[1].begin, ch.in[2].begin};
  b.hi = {ch.n.end, ch.c.end, ch.in[0].end, ch.in[1].end, ch.in[2].end};
  return b;
}

Box w_box(const Chunk& ch, const ConvProblem& p) {
  Box b;
  b.lo = {ch.k.begin, ch.c.begin, 0, 0, 0};
  b.hi = {ch.k.end, ch.c.end, p.kernel[0], p.kernel[1], p.kernel[2]};
  return b;
}

Box y_box(const Chunk& ch) {
  Box b;
  b.lo = {ch.n.begin, ch.k.begin, ch.out[0].begin, ch.out[1].begin, ch.out[2].begin};
  b.hi = {ch.n.end, ch.k.end, ch.out[0].end, ch.out[1].end, ch.out[2].end};
  return b;
}

ChunkConv chunk_shape(const Chunk& ch, const ConvProblem& p) {
  ChunkConv s;
  s.spatial_dims = p.spatial_dims;
  s.n = ch.n.size();
  s.c = ch.c.size();
  s.k = ch.k.size();
  for (int d = 0; d < kMaxSpatial; ++d) {
    s.in[d] = ch.in[d].size();
    s.out[d] = ch.out[d].size();
    s.kernel[d] = p.kernel[d];
    s.stride[d] = p.stride[d];
    s.dilation[d] = p.dilation[d];
    s.padding[d] = ch.compute_padding[d];
  }
  return s;
}

}  // namespace

RunStats run_conv_forward(const Plan& plan, Backend& backend, const float* x, const float* w, const float* bias,
                          float* y, ThreadPool& pool) {
  const auto start = Clock::now();
  const ConvProblem& p = plan.problem;
  const size_t es = dtype_size(p.dtype);
  RunStats stats;
  if (plan.peak_device_bytes > plan.memory_limit)
    throw std::logic_error("plan exceeds its memory_limit");  // the planner guarantees this never happens

  const TensorView xv = TensorView::contiguous(x, {p.n, p.c, p.in[0], p.in[1], p.in[2]}, 5, es);
  const TensorView wv = TensorView::contiguous(w, {p.k, p.c / p.groups, p.kernel[0], p.kernel[1], p.kernel[2]}, 5, es);
  const TensorView yv = TensorView::contiguous(y, {p.n, p.k, p.out[0], p.out[1], p.out[2]}, 5, es);

  // Declared before the arena so that the queues are drained before device memory goes back.
  DeviceArena arena(backend, plan.peak_device_bytes);
  PipelineResources res(backend);
  stats.device_bytes_reserved = arena.capacity();

  auto make_ring = [&](int count, size_t bytes) {
    SlotRing r;
    for (int i = 0; i < count; ++i) r.slots.push_back(arena.take(bytes));
    r.ready = res.events(count);
    r.free = res.events(count);
    return r;
  };
  SlotRing xr = make_ring(plan.x_buffers, plan.x_slot_bytes);
  SlotRing wr = make_ring(plan.w_buffers, plan.w_slot_bytes);
  SlotRing yr = make_ring(plan.buffers, plan.y_slot_bytes);
  void* bias_dev = arena.take(plan.bias_bytes);
  void* workspace = arena.take(plan.workspace_bytes);
  std::vector<Backend::Event> y_computed = res.events(plan.buffers);

  // Input staging: a ring of buffers, each free again once its H2D copy has run.
  const int in_stages = 3;
  const size_t in_stage_bytes = std::max({plan.x_slot_bytes, plan.w_slot_bytes, plan.bias_bytes,
                                          p.beta != 0.0 ? plan.y_slot_bytes : size_t{0}});
  // Pinned (or registered) caller memory is DMA'd directly; only pageable tensors need staging.
  const bool x_direct = backend.host_is_device_accessible(x), w_direct = backend.host_is_device_accessible(w);
  const bool bias_direct = p.has_bias && backend.host_is_device_accessible(bias);
  const bool y_direct = backend.host_is_device_accessible(y);
  const bool inputs_direct = x_direct && w_direct && (!p.has_bias || bias_direct) && (p.beta == 0.0 || y_direct);
  std::vector<void*> stage_in;
  if (!inputs_direct)
    for (int i = 0; i < in_stages; ++i) stage_in.push_back(res.staging(in_stage_bytes));
  std::vector<Backend::Event> stage_in_free = res.events(in_stages);
  int next_stage = 0;
  // Output staging: one buffer per y slot; scattered by the host before the slot's next D2H.
  std::vector<void*> stage_out;
  if (!y_direct)
    for (int i = 0; i < plan.buffers; ++i) stage_out.push_back(res.staging(plan.y_slot_bytes));

  // Moves a region into a device slot once `slot_free` has completed: by DMA straight from the
  // caller's memory when it is pinned, else gathered by host workers into a staging buffer first.
  auto load = [&](const TensorView& view, bool direct, const Box& box, void* device, Backend::Event slot_free,
                  Backend::Event ready) {
    const size_t bytes = static_cast<size_t>(box.elements(5)) * es;
    if (direct) {
      const BoxCopies copies = strided_box_copies(view, box, static_cast<char*>(device), true);
      backend.wait(Queue::h2d, slot_free);
      if (!copies.covers_all) backend.zero_device(device, bytes);  // halo outside the tensor
      for (const StridedCopy& c : copies.copies) {
        backend.copy_h2d_strided(c);
        stats.bytes_h2d += c.width_bytes * c.height * c.depth;
      }
      backend.record(ready, Queue::h2d);
      return;
    }
    const int s = next_stage;
    next_stage = (next_stage + 1) % in_stages;
    auto t = Clock::now();
    backend.host_wait(stage_in_free[s]);
    stats.host_wait_seconds += seconds_since(t);
    t = Clock::now();
    gather_box(view, box, stage_in[s], pool);
    stats.gather_seconds += seconds_since(t);
    backend.wait(Queue::h2d, slot_free);
    backend.copy_h2d(device, stage_in[s], bytes);
    backend.record(stage_in_free[s], Queue::h2d);
    backend.record(ready, Queue::h2d);
    stats.bytes_h2d += bytes;
  };

  struct PendingScatter {
    int slot;
    Box box;
  };
  std::deque<PendingScatter> pending;
  auto scatter_front = [&] {
    const PendingScatter ps = pending.front();
    pending.pop_front();
    auto t = Clock::now();
    backend.host_wait(yr.free[ps.slot]);
    stats.host_wait_seconds += seconds_since(t);
    t = Clock::now();
    scatter_box(stage_out[ps.slot], yv, ps.box, pool);
    stats.scatter_seconds += seconds_since(t);
  };

  Backend::Event bias_ready = res.event();
  if (p.has_bias) {
    TensorView bv = TensorView::contiguous(bias, {p.k, 1, 1, 1, 1}, 5, es);
    Box b;
    b.hi = {p.k, 1, 1, 1, 1};
    load(bv, bias_direct, b, bias_dev, bias_ready, bias_ready);
  }

  for (const Chunk& ch : plan.chunks) {
    if (ch.load_x) {
      const int s = xr.advance();
      load(xv, x_direct, x_box(ch), xr.slots[s], xr.free[s], xr.ready[s]);
    }
    if (ch.load_w) {
      const int s = wr.advance();
      load(wv, w_direct, w_box(ch, p), wr.slots[s], wr.free[s], wr.ready[s]);
    }
    if (ch.first_c) {
      const int s = yr.advance();
      // Its staging buffer still holds an earlier chunk's y: scatter that first.
      while (std::any_of(pending.begin(), pending.end(), [&](const PendingScatter& ps) { return ps.slot == s; }))
        scatter_front();
      if (p.beta != 0.0) load(yv, y_direct, y_box(ch), yr.slots[s], yr.free[s], yr.ready[s]);
      backend.wait(Queue::compute, yr.free[s]);
    }
    const int xs = xr.current, ws = wr.current, ys = yr.current;
    backend.wait(Queue::compute, xr.ready[xs]);
    backend.wait(Queue::compute, wr.ready[ws]);
    if (ch.first_c && p.beta != 0.0) backend.wait(Queue::compute, yr.ready[ys]);
    if (ch.last_c && p.has_bias) backend.wait(Queue::compute, bias_ready);
    const float* chunk_bias = ch.last_c && p.has_bias ? static_cast<const float*>(bias_dev) + ch.k.begin : nullptr;
    backend.conv_forward(chunk_shape(ch, p), static_cast<const float*>(xr.slots[xs]),
                         static_cast<const float*>(wr.slots[ws]), chunk_bias, static_cast<float*>(yr.slots[ys]),
                         p.alpha, ch.first_c ? p.beta : 1.0, workspace, plan.workspace_bytes);
    backend.record(xr.free[xs], Queue::compute);
    backend.record(wr.free[ws], Queue::compute);
    ++stats.chunks;
    if (ch.last_c) {
      backend.record(y_computed[ys], Queue::compute);
      backend.wait(Queue::d2h, y_computed[ys]);
      const Box box = y_box(ch);
      if (y_direct) {  // pinned y: DMA straight into place, nothing left for the host to do
        for (const StridedCopy& c : strided_box_copies(yv, box, static_cast<char*>(yr.slots[ys]), false).copies) {
          backend.copy_d2h_strided(c);
          stats.bytes_d2h += c.width_bytes * c.height * c.depth;
        }
        backend.record(yr.free[ys], Queue::d2h);
      } else {
        const size_t bytes = static_cast<size_t>(box.elements(5)) * es;
        backend.copy_d2h(stage_out[ys], yr.slots[ys], bytes);
        backend.record(yr.free[ys], Queue::d2h);
        stats.bytes_d2h += bytes;
        pending.push_back({ys, box});
      }
    }
    // Scatter whatever has already arrived, so host work overlaps the device's.
    while (!pending.empty() && backend.query(yr.free[pending.front().slot])) scatter_front();
  }
  while (!pending.empty()) scatter_front();
  backend.synchronize();
  stats.seconds = seconds_since(start);
  return stats;
}

}  // namespace ooc
