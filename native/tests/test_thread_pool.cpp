// ThreadPool::parallel_for: every index exactly once, for any count and pool size; exceptions reach
// the caller and leave the pool usable; many calls in a row, calls from several threads, and calls
// nested inside a body.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "util/thread_pool.hpp"

namespace {

using ooc::ThreadPool;

// Runs parallel_for(count) and checks each index was visited once and every block was sane.
void expect_covers_once(ThreadPool& pool, int64_t count) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(std::max<int64_t>(count, 0)));
  std::atomic<bool> bad_block{false};
  pool.parallel_for(count, [&](int64_t begin, int64_t end) {
    if (begin < 0 || end > count || begin >= end) bad_block = true;
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  EXPECT_FALSE(bad_block) << "count " << count;
  for (int64_t i = 0; i < count; ++i)
    ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i << " of " << count;
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t count : {0, 1, 2, 3, 7, 31, 32, 33, 1000, 100003}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      expect_covers_once(pool, count);
    }
  }
}

TEST(ThreadPool, NegativeCountDoesNothing) {
  ThreadPool pool(2);
  bool called = false;
  pool.parallel_for(-5, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ThreadPool, WorkersAndCallerShareTheWork) {
  ThreadPool pool(4);
  std::mutex m;
  std::set<std::thread::id> ids;
  pool.parallel_for(64, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard<std::mutex> lock(m);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_GT(ids.size(), 1u) << "64 sleeping blocks all ran on one thread";
}

TEST(ThreadPool, ExceptionsPropagateAndThePoolStaysUsable) {
  ThreadPool pool(4);
  for (int round = 0; round < 20; ++round) {
    try {
      pool.parallel_for(1000, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          if (i == 357) throw std::runtime_error("index 357 failed");
      });
      FAIL() << "the exception was swallowed";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "index 357 failed");
    }
    expect_covers_once(pool, 5000);
  }
  // Every block throwing: one exception comes out, not a crash.
  EXPECT_THROW(pool.parallel_for(100, [](int64_t, int64_t) { throw std::logic_error("all"); }), std::logic_error);
  // A single-index call runs inline and still propagates.
  EXPECT_THROW(pool.parallel_for(1, [](int64_t, int64_t) { throw std::out_of_range("one"); }), std::out_of_range);
  expect_covers_once(pool, 77);
}

TEST(ThreadPool, ManySequentialCalls) {
  ThreadPool pool(3);
  for (int i = 0; i < 2000; ++i) {
    expect_covers_once(pool, 1 + i % 50);
    if (HasFatalFailure()) return;
  }
}

TEST(ThreadPool, CallsFromSeveralThreads) {
  ThreadPool pool(3);
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t)
    callers.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const int64_t count = 10 + (i * 7 + t) % 90;
        std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
        pool.parallel_for(count, [&](int64_t b, int64_t e) {
          for (int64_t j = b; j < e; ++j) hits[static_cast<size_t>(j)]++;
        });
        for (auto& h : hits) failures += h.load() != 1;
      }
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPool, NestedCallOnAnotherPool) {
  ThreadPool outer(3), inner(2);
  std::vector<std::atomic<int>> hits(40 * 30);
  outer.parallel_for(40, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      inner.parallel_for(30, [&](int64_t ib, int64_t ie) {
        for (int64_t j = ib; j < ie; ++j) hits[static_cast<size_t>(i * 30 + j)]++;
      });
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

// A body that itself calls parallel_for on the same pool (e.g. a kernel run from a copy worker).
// Run in a child process with an alarm, so that a deadlock fails the test instead of hanging ctest.
// Regression: a nested call once deadlocked on the pool's call mutex; it now runs inline.
TEST(ThreadPoolDeathTest, NestedCallOnTheSamePoolCompletes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        alarm(3);
        ThreadPool pool(3);
        std::vector<std::atomic<int>> hits(8 * 16);
        pool.parallel_for(8, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i)
            pool.parallel_for(16, [&](int64_t ib, int64_t ie) {
              for (int64_t j = ib; j < ie; ++j) hits[static_cast<size_t>(i * 16 + j)]++;
            });
        });
        for (auto& h : hits)
          if (h.load() != 1) _exit(2);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(ThreadPool, SharedPoolSize) {
  ThreadPool& shared = ThreadPool::shared();
  EXPECT_GE(shared.size(), 1);
  EXPECT_LE(shared.size(), 16);
  EXPECT_EQ(&shared, &ThreadPool::shared());
  expect_covers_once(shared, 12345);
}

}  // namespace
