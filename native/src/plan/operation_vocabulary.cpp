// Each operation's names for its tensors and for the members of its chunks (plan.hpp's Chunk and
// slot families are one vocabulary for all of them), written once: Plan::describe and Plan::chunk_fields
// (which Python's Plan.chunks walks) read them here.
#include "plan/operation_vocabulary.hpp"

#include <string>
#include <vector>

namespace ooc {

SlotNames slot_names(Operation op) {
  switch (op) {
    case Operation::forward: return {"x", "w", "y", "bias", "y"};
    case Operation::backward_data: return {"dx", "w", "dy", "", "dx"};
    case Operation::backward_filter: return {"x", "dw", "dy", "", "dw"};
    case Operation::backward_bias: return {"", "", "dy", "db", "db"};
    case Operation::activation_forward: case Operation::softmax_forward: return {"x", "", "y", "", "y"};
    case Operation::activation_backward: return {"y, dy, x", "", "dx", "", "dx"};
    case Operation::softmax_backward: return {"y, dy", "", "dx", "", "dx"};  // its gradient needs no x
    case Operation::add_tensor: return {"c", "a", "out", "", "out"};
    case Operation::pool_forward: return {"x", "", "y", "", "y"};
    case Operation::pool_backward: return {"x, dx", "", "y, dy", "", "dx"};
    case Operation::matmul: return {"a", "b", "c", "bias", "c"};
    case Operation::batchnorm_backward: return {"x", "dy", "dx", "coefficients", "dx"};
    default: return {"x", "", "y", "coefficients", "y"};  // batch-norm forward
  }
}

const char* reduction_name(Operation op) {
  switch (op) {
    case Operation::forward: return "c";
    case Operation::backward_data: return "k";
    case Operation::matmul: return "K";
    default: return "n and space";
  }
}

namespace {

using M = ChunkMember;
using Fields = std::vector<ChunkField>;

Fields operation_fields(Operation op) {
  switch (op) {
    case Operation::forward:  // out: the y rows computed; in: the x rows read, halo included
      return {{"n", M::n}, {"k", M::k}, {"c", M::c}, {"out", M::out}, {"in", M::in}, {"load_x", M::load_x},
              {"load_w", M::load_w}, {"first_c", M::first_c}, {"last_c", M::last_c}};
    case Operation::backward_data:  // dx: written back; dx_computed: the device's; dy_read: the rows loaded
      return {{"n", M::n}, {"c", M::c}, {"k", M::k}, {"dx", M::target}, {"dx_computed", M::in}, {"dy", M::out},
              {"dy_read", M::out_read}, {"load_dy", M::load_y}, {"load_w", M::load_w}, {"first", M::first_c},
              {"last", M::last_c}};
    case Operation::backward_filter:
      return {{"n", M::n}, {"k", M::k}, {"c", M::c}, {"dy", M::out}, {"x", M::in}, {"load_x", M::load_x},
              {"load_dy", M::load_y}, {"first", M::first_c}, {"last", M::last_c}};
    case Operation::backward_bias:
      return {{"n", M::n}, {"k", M::k}, {"dy", M::out}, {"load_dy", M::load_y}, {"first", M::first_c},
              {"last", M::last_c}};
    case Operation::matmul:  // rows of c, columns of c, the K range reduced
      return {{"m", M::n}, {"n", M::k}, {"k", M::c}, {"load_a", M::load_x}, {"load_b", M::load_w},
              {"first", M::first_c}, {"last", M::last_c}};
    case Operation::batchnorm_forward_training:
    case Operation::batchnorm_forward_inference:
    case Operation::batchnorm_backward:  // an x tile
      return {{"n", M::n}, {"c", M::c}, {"spatial", M::in}};
    default:  // layers: box: the x-shaped rows loaded; out: the y-shaped rows on the device (pooling);
              // target: the rows written back (disjoint tiles of the output)
      return {{"n", M::n}, {"c", M::c}, {"box", M::in}, {"out", M::out}, {"target", M::target}};
  }
}

}  // namespace

std::vector<ChunkField> Plan::chunk_fields() const {
  if (fused == "conv_bias_activation_pooling_forward")  // y: rows computed; x: rows read; pooled: written back
    return {{"n", M::n}, {"k", M::k}, {"c", M::c}, {"y", M::out}, {"x", M::in}, {"pooled", M::target},
            {"pooled_computed", M::out_read}, {"load_x", M::load_x}, {"load_w", M::load_w},
            {"first_c", M::first_c}, {"last_c", M::last_c}};
  if (fused == "conv_backward_data_filter_bias" || fused == "activation_conv_backward_data_filter_bias" ||
      fused == "pooling_activation_conv_backward_data_filter_bias")
    // dy: the tile loaded (once); x: the x slab and the dx rows computed; dx: the rows written back
    return {{"n", M::n}, {"c", M::c}, {"dy", M::out}, {"x", M::in}, {"dx", M::target}, {"load_dy", M::load_y},
            {"load_x", M::load_x}, {"load_w", M::load_w}};
  return operation_fields(problem.op);  // the other fused functions use their operation's chunks
}

}  // namespace ooc
