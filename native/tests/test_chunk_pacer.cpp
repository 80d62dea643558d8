// The pacer's lead (exec/chunk_pacer.hpp) and how RunStats of several runs combine (ooc/types.hpp).
#include <gtest/gtest.h>

#include "exec/chunk_pacer.hpp"

namespace ooc {
namespace {

TEST(ChunkPacerLead, DirectAndStagedChunksOfOrdinaryLength) {
  EXPECT_EQ(ChunkPacer::lead_for(false, 1e-3), ChunkPacer::kDirectLead);
  EXPECT_EQ(ChunkPacer::lead_for(true, 1e-3), ChunkPacer::kStagedLead);
  EXPECT_EQ(ChunkPacer::lead_for(true, ChunkPacer::kShortChunkSeconds), ChunkPacer::kStagedLead);
}

TEST(ChunkPacerLead, ShortChunksQueueEnoughToFillTheShortChunkTime) {
  EXPECT_EQ(ChunkPacer::lead_for(false, ChunkPacer::kShortChunkSeconds / 4), 4);
  EXPECT_EQ(ChunkPacer::lead_for(false, ChunkPacer::kShortChunkSeconds / 2.5), 3);
  EXPECT_EQ(ChunkPacer::lead_for(true, ChunkPacer::kShortChunkSeconds / 2), ChunkPacer::kStagedLead);
  EXPECT_EQ(ChunkPacer::lead_for(false, 1e-9), ChunkPacer::kMaxLead);
}

TEST(ChunkPacerLead, NoPredictionKeepsTheBaseLead) {
  EXPECT_EQ(ChunkPacer::lead_for(false, 0.0), ChunkPacer::kDirectLead);
  EXPECT_EQ(ChunkPacer::lead_for(true, -1.0), ChunkPacer::kStagedLead);
}

RunStats run(double seconds, int64_t chunks, double busy) {
  RunStats s;
  s.seconds = seconds;
  s.chunks = chunks;
  s.bytes_h2d = 100;
  s.pace_wait_seconds = seconds / 2;
  s.device_bytes_reserved = static_cast<size_t>(chunks) * 10;
  s.compute_busy_seconds = busy;
  return s;
}

TEST(RunStatsAccumulate, SequentialRunsAddTheirTime) {
  RunStats total = run(1.0, 3, -1);
  accumulate(total, run(2.0, 5, 0.5), RunsWere::sequential);
  EXPECT_DOUBLE_EQ(total.seconds, 3.0);
  EXPECT_DOUBLE_EQ(total.pace_wait_seconds, 1.5);
  EXPECT_EQ(total.chunks, 8);
  EXPECT_EQ(total.bytes_h2d, 200u);
  EXPECT_EQ(total.device_bytes_reserved, 50u);
  EXPECT_DOUBLE_EQ(total.compute_busy_seconds, 0.5);  // unmeasured (-1) does not subtract
}

TEST(RunStatsAccumulate, ParallelRunsTakeTheSlowest) {
  RunStats total = run(1.0, 3, 0.25);
  accumulate(total, run(2.0, 5, 0.5), RunsWere::parallel);
  EXPECT_DOUBLE_EQ(total.seconds, 2.0);
  EXPECT_EQ(total.chunks, 8);
  EXPECT_DOUBLE_EQ(total.compute_busy_seconds, 0.75);
}

}  // namespace
}  // namespace ooc
