#include "plan/slot_table.hpp"

#include <stdexcept>
#include <string>
#include <vector>

#include "plan/operation_vocabulary.hpp"

namespace ooc {
namespace {

// "y, dy, x" -> {"y", "dy", "x"}.
std::vector<std::string> tensor_names(const std::string& list) {
  std::vector<std::string> names;
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t comma = list.find(", ", begin);
    const size_t end = comma == std::string::npos ? list.size() : comma;
    if (end > begin) names.push_back(list.substr(begin, end - begin));
    if (comma == std::string::npos) break;
    begin = comma + 2;
  }
  return names;
}

// A family's rings: `buffers` slots in all, shared evenly by the tensors it streams.
void add_family(std::vector<SlotPlan>& slots, const std::string& names, int buffers, size_t bytes) {
  if (buffers <= 0 || bytes == 0) return;
  const std::vector<std::string> tensors = tensor_names(names);
  if (tensors.empty()) throw std::logic_error("slot table: a plan streams a family its operation does not name");
  if (buffers % static_cast<int>(tensors.size()) != 0)
    throw std::logic_error("slot table: a family's slots are not shared evenly by its tensors");
  for (const std::string& t : tensors)
    slots.push_back({t, SlotKind::streamed, buffers / static_cast<int>(tensors.size()), bytes, 0});
}

// The y-shaped tensors a fused backward streams per dy tile (fused.hpp): dy and the activation's
// y and input; through a pooling, y and the activation's input beside the pooled dq and q.
std::string y_family_names(const Plan& plan, const SlotNames& names) {
  if (plan.pooled_inputs) return plan.y_inputs > 1 ? "y, pre" : "y";
  if (plan.y_inputs == 3) return "dy, y, pre";
  if (plan.y_inputs == 2) return "dy, y";
  return names.y;
}

}  // namespace

void add_block_slot(Plan& plan, SlotKind kind, std::string name, size_t offset, size_t bytes) {
  if (kind == SlotKind::streamed) throw std::logic_error("slot table: a block slot cannot be streamed");
  plan.slots.push_back({std::move(name), kind, 1, bytes, offset});
}

void finish_slot_table(Plan& plan) {
  const Operation op = plan.problem.op;
  // A fused backward streams x in and dx out beside each other (out_buffers).
  const bool fused_backward = plan.out_buffers > 0 && op == Operation::backward_data;
  const SlotNames names = fused_backward ? SlotNames{"x", "w", "dy", "", "dx"} : slot_names(op);
  std::vector<SlotPlan> streamed;
  add_family(streamed, names.x, plan.x_buffers, plan.x_slot_bytes);
  add_family(streamed, names.w, plan.w_buffers, plan.w_slot_bytes);
  // The forward's output slots are its pipeline depth (y_buffers may say less when fewer chunks).
  const int y_slots = op == Operation::forward ? plan.buffers : plan.y_buffers;
  add_family(streamed, y_family_names(plan, names), y_slots * (op == Operation::forward ? 1 : plan.y_inputs),
             plan.y_slot_bytes);
  if (plan.pooled_inputs) add_family(streamed, "dq, q", plan.pooled_inputs * plan.y_buffers, plan.pooled_slot_bytes);
  if (plan.bias_bytes) {
    const int slots = plan.bias_buffers > 0 ? plan.bias_buffers : 1;
    add_family(streamed, *names.bias ? names.bias : "bias", slots, plan.bias_bytes / static_cast<size_t>(slots));
  }
  add_family(streamed, names.output, plan.out_buffers, plan.out_slot_bytes);

  size_t kept = 0, scratch = 0, total = plan.workspace_bytes;
  for (const SlotPlan& s : plan.slots) (s.kind == SlotKind::kept ? kept : scratch) += s.bytes;
  if (kept != plan.kept_bytes || scratch != plan.scratch_bytes)
    throw std::logic_error("slot table: the recorded kept or scratch pieces do not cover their blocks");
  streamed.insert(streamed.end(), plan.slots.begin(), plan.slots.end());
  plan.slots = std::move(streamed);
  for (const SlotPlan& s : plan.slots) total += static_cast<size_t>(s.buffers) * s.bytes;
  if (total != plan.peak_device_bytes)
    throw std::logic_error("slot table: " + std::to_string(total) + " bytes laid out, the plan's peak is " +
                           std::to_string(plan.peak_device_bytes));
}

const SlotPlan& Plan::slot(const std::string& name) const {
  for (const SlotPlan& s : slots)
    if (s.name == name) return s;
  throw std::logic_error("plan: no slot called " + name);
}

const char* slot_kind_name(SlotKind kind) {
  switch (kind) {
    case SlotKind::streamed: return "streamed";
    case SlotKind::kept: return "kept";
    case SlotKind::scratch: return "scratch";
  }
  return "?";
}

}  // namespace ooc
