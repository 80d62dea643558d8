#include "exec/chunk_pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

#include "exec/chunk_pacer.hpp"
#include "exec/device_arena.hpp"
#include "exec/scatter_worker.hpp"
#include "plan/conv_geometry.hpp"

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
  const void* current_data() const { return current < 0 ? nullptr : slots[current]; }
};

// Writes the outputs kept on the device back once every chunk has computed: by DMA straight into
// pinned memory, else through staging scattered by the host workers. They are small (a fused
// backward's dw and db), so this runs after the pipeline has drained.
void store_kept(const OperationSpec& spec, Backend& backend, char* kept_dev, PipelineResources& res, ThreadPool& pool,
                RunStats& stats) {
  const Backend::Event computed = res.event();
  backend.record(computed, Queue::compute);
  backend.wait(Queue::d2h, computed);
  std::vector<std::pair<const OperationSpec::Kept*, void*>> staged;
  for (const OperationSpec::Kept& k : spec.kept) {
    char* device = kept_dev + k.offset;
    if (backend.host_is_device_accessible(k.region.view.data)) {
      for (const StridedCopy& c : strided_box_copies(k.region.view, k.region.box, device, false).copies) {
        backend.copy_d2h_strided(c);
        stats.bytes_d2h += c.width_bytes * c.height * c.depth;
      }
      continue;
    }
    const size_t bytes = static_cast<size_t>(k.region.box.elements(kMaxRank)) * k.region.view.element_size;
    void* stage = res.staging(bytes);
    backend.copy_d2h(stage, device, bytes);
    stats.bytes_d2h += bytes;
    staged.emplace_back(&k, stage);
  }
  const Backend::Event copied = res.event();
  backend.record(copied, Queue::d2h);
  backend.host_wait(copied);
  for (const auto& [k, stage] : staged) scatter_box(stage, k->region.view, k->region.box, pool);
}

}  // namespace

ChunkConv chunk_shape(const Chunk& ch, const Plan& plan) {
  const ConvProblem& p = plan.problem;
  ChunkConv s;
  s.math = plan.math;
  s.dtype = p.dtype;
  s.out_dtype = p.output_dtype();
  s.spatial_dims = p.spatial_dims;
  s.layout = p.layout;
  s.n = ch.n.size();
  s.c = ch.c.size();
  s.k = ch.k.size();
  s.groups = groups_spanned(ch.c, p.c / p.groups);
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

RunStats run_chunks(const Plan& plan, Backend& backend, ThreadPool& pool, const OperationSpec& spec) {
  const auto start = Clock::now();
  RunStats stats;
  if (plan.peak_device_bytes > plan.memory_limit)
    throw std::logic_error("plan exceeds its memory_limit");  // the planner guarantees this never happens

  // Declared before the arena so that the queues are drained before device memory goes back.
  DeviceArena arena(backend, plan.peak_device_bytes);
  PipelineResources res(backend);
  stats.device_bytes_reserved = arena.capacity();
  backend.start_queue_timing();

  auto make_ring = [&](const StreamedTensor& t) {
    SlotRing r;
    for (int i = 0; i < t.slots; ++i) r.slots.push_back(arena.take(t.slot_bytes));
    r.ready = res.events(t.slots);
    r.free = res.events(t.slots);
    return r;
  };
  if (spec.inputs.size() > static_cast<size_t>(kMaxStreamedInputs))
    throw std::logic_error("pipeline: more streamed inputs than ChunkBuffers holds");
  std::vector<SlotRing> in_rings;
  for (const StreamedInput& in : spec.inputs) in_rings.push_back(make_ring(in.tensor));
  SlotRing outr = make_ring(spec.out);
  void* resident_dev = arena.take(spec.resident_bytes);
  void* workspace = arena.take(spec.workspace_bytes);
  char* kept_dev = static_cast<char*>(arena.take(spec.kept_bytes));
  void* scratch = arena.take(spec.scratch_bytes);
  std::vector<Backend::Event> out_computed = res.events(spec.out.slots);
  const bool has_resident = spec.resident_bytes > 0, load_out = spec.beta != 0.0;
  // The output's first chunks load from init_data when the operation has one (fused forward's z).
  const void* init_data = spec.init_data ? spec.init_data : spec.out.data;
  const auto& init_region = spec.init_data ? spec.init_region : spec.out_region;

  // Pinned (or registered) caller memory is DMA'd directly; only pageable tensors need staging.
  auto direct = [&](const void* data) { return backend.host_is_device_accessible(data); };
  std::vector<bool> in_direct;
  for (const StreamedInput& in : spec.inputs) in_direct.push_back(!in.host_gather && direct(in.tensor.data));
  const bool out_direct = direct(spec.out.data), init_direct = direct(init_data);
  const bool resident_direct = has_resident && direct(spec.resident.view.data);

  // Input staging: a ring of buffers, each free again once its H2D copy has run, as large as the
  // largest slot that is staged (pinned x with pageable w stages only w's small slices).
  const int in_stages = 3;
  size_t in_stage_bytes = std::max(has_resident && !resident_direct ? spec.resident_bytes : size_t{0},
                                   load_out && !init_direct ? spec.out.slot_bytes : size_t{0});
  for (size_t i = 0; i < spec.inputs.size(); ++i)
    if (!in_direct[i]) in_stage_bytes = std::max(in_stage_bytes, spec.inputs[i].tensor.slot_bytes);
  const bool inputs_direct = (!has_resident || resident_direct) && (!load_out || init_direct) &&
                             std::all_of(in_direct.begin(), in_direct.end(), [](bool d) { return d; });
  std::vector<void*> stage_in;
  if (!inputs_direct)
    for (int i = 0; i < in_stages; ++i) stage_in.push_back(res.staging(in_stage_bytes));
  std::vector<Backend::Event> stage_in_free = res.events(in_stages);
  int next_stage = 0;
  // Output staging: one buffer per output slot; scattered by the host before the slot's next D2H.
  std::vector<void*> stage_out;
  if (!out_direct)
    for (int i = 0; i < spec.out.slots; ++i) stage_out.push_back(res.staging(spec.out.slot_bytes));

  // Moves a region into a device slot once `slot_free` has completed: by DMA straight from the
  // caller's memory when it is pinned, else gathered by host workers into a staging buffer first.
  auto load = [&](const Region& r, bool is_direct, void* device, Backend::Event slot_free, Backend::Event ready) {
    const size_t bytes = static_cast<size_t>(r.box.elements(5)) * r.view.element_size;
    if (is_direct) {
      const BoxCopies copies = strided_box_copies(r.view, r.box, static_cast<char*>(device), true);
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
    gather_box(r.view, r.box, stage_in[s], pool);
    stats.gather_seconds += seconds_since(t);
    backend.wait(Queue::h2d, slot_free);
    backend.copy_h2d(device, stage_in[s], bytes);
    backend.record(stage_in_free[s], Queue::h2d);
    backend.record(ready, Queue::h2d);
    stats.bytes_h2d += bytes;
  };

  // Output regions copied into staging are scattered by a thread of their own, while this one
  // gathers the next inputs. Declared after the arena and staging: joined before they go.
  ScatterWorker scatter(backend, ThreadPool::scatter_shared(), std::max(spec.out.slots, 1));

  // Writes back the part of the output region inside its view, from device slot s (on Queue::d2h).
  auto store = [&](const Region& r, int s) {
    void* device = outr.slots[s];
    if (out_direct) {  // pinned output: DMA straight into place, nothing left for the host to do
      for (const StridedCopy& c : strided_box_copies(r.view, r.box, static_cast<char*>(device), false).copies) {
        backend.copy_d2h_strided(c);
        stats.bytes_d2h += c.width_bytes * c.height * c.depth;
      }
      backend.record(outr.free[s], Queue::d2h);
      return;
    }
    const Box inside = r.box.clipped_to(r.view.shape, 5);
    if (inside == r.box) {  // all of it: one contiguous copy of the slot
      const size_t bytes = static_cast<size_t>(r.box.elements(5)) * r.view.element_size;
      backend.copy_d2h(stage_out[s], device, bytes);
      stats.bytes_d2h += bytes;
    } else {  // only a part (a computed region wider than its target): copy that part out, densely
      std::array<int64_t, kMaxRank> extent{};
      for (int i = 0; i < 5; ++i) extent[i] = r.box.hi[i] - r.box.lo[i];
      const TensorView slot = TensorView::dense(device, extent, 5, r.view.element_size, r.view.channels_last);
      for (const StridedCopy& c :
           strided_box_copies(slot, inside.shifted(r.box.lo), static_cast<char*>(stage_out[s]), true).copies) {
        backend.copy_d2h_strided(c);
        stats.bytes_d2h += c.width_bytes * c.height * c.depth;
      }
    }
    backend.record(outr.free[s], Queue::d2h);
    if (inside.elements(5) > 0) scatter.push(s, stage_out[s], outr.free[s], r.view, inside);
  };

  Backend::Event resident_ready = res.event();
  if (has_resident) load(spec.resident, resident_direct, resident_dev, resident_ready, resident_ready);

  ChunkBuffers buffers;
  buffers.inputs = static_cast<int>(spec.inputs.size());
  buffers.resident = resident_dev;
  buffers.kept = kept_dev;
  buffers.scratch = scratch;
  buffers.workspace = workspace;
  // Paces the loop and asks the call's observer between chunks: a cancel throws from here, and the
  // destructors above drain the queues before anything is freed.
  const double chunk_seconds = plan.predicted_seconds / static_cast<double>(std::max<int64_t>(
                                  1, static_cast<int64_t>(plan.num_chunks()) * std::max(plan.passes, 1)));
  ChunkPacer pacer(backend, res.events(ChunkPacer::lead_for(!inputs_direct, chunk_seconds)), ObservedCall::current());
  std::vector<bool> loaded(spec.inputs.size());
  for (const Chunk& ch : plan.chunks) {
    pacer.before_chunk(stats.chunks);
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      const StreamedInput& in = spec.inputs[i];
      loaded[i] = !in.loads || in.loads(ch);
      if (!loaded[i]) continue;
      SlotRing& r = in_rings[i];
      const int s = r.advance();
      load(in.region(ch), in_direct[i], r.slots[s], r.free[s], r.ready[s]);
    }
    if (ch.first_c) {
      const int s = outr.advance();
      // Its staging buffer may still hold an earlier chunk's output on its way out.
      if (!out_direct) {
        const auto t = Clock::now();
        scatter.wait_slot_free(s);
        stats.host_wait_seconds += seconds_since(t);
      }
      if (load_out) load(init_region(ch), init_direct, outr.slots[s], outr.free[s], outr.ready[s]);
      backend.wait(Queue::compute, outr.free[s]);
    }
    const int os = outr.current;
    // A slot kept from an earlier chunk was waited for by that chunk's compute, on the same queue.
    for (size_t i = 0; i < in_rings.size(); ++i)
      if (loaded[i]) backend.wait(Queue::compute, in_rings[i].ready[in_rings[i].current]);
    if (ch.first_c && load_out) backend.wait(Queue::compute, outr.ready[os]);
    // Once: the compute queue keeps its order, so every later chunk runs after the resident load too.
    if (has_resident && stats.chunks == 0) backend.wait(Queue::compute, resident_ready);
    for (size_t i = 0; i < in_rings.size(); ++i) buffers.in[i] = in_rings[i].current_data();
    buffers.out = outr.slots[os];
    buffers.beta = ch.first_c ? spec.beta : 1.0;
    spec.compute(ch, buffers);
    for (const SlotRing& r : in_rings) backend.record(r.free[r.current], Queue::compute);
    pacer.computed(stats.chunks);
    ++stats.chunks;
    if (ch.last_c) {
      backend.record(out_computed[os], Queue::compute);
      backend.wait(Queue::d2h, out_computed[os]);
      store(spec.out_region(ch), os);
    }
  }
  scatter.finish();
  if (!spec.kept.empty()) store_kept(spec, backend, kept_dev, res, pool, stats);
  stats.scatter_seconds = scatter.scatter_seconds();
  stats.host_wait_seconds += scatter.host_wait_seconds();
  backend.synchronize();
  pacer.finished(stats.chunks);
  stats.pace_wait_seconds = pacer.waited_seconds();
  stats.seconds = seconds_since(start);
  const std::array<double, 3> busy = backend.queue_busy_seconds();
  stats.h2d_busy_seconds = busy[0];
  stats.compute_busy_seconds = busy[1];
  stats.d2h_busy_seconds = busy[2];
  return stats;
}

}  // namespace ooc
