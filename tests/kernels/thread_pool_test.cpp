// The CPU thread pool: every index covered exactly once on grain boundaries, many
// back-to-back jobs, pools created and destroyed at once (a worker that starts after the
// destructor must still exit), and more threads than cores without the hand-off stalls a
// spinning pool has on an oversubscribed machine.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace hearth::kernels::cpu {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceOnGrainBoundaries) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 4099}) {
      for (int64_t grain : {1, 3, 16, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        std::atomic<bool> misaligned{false};
        pool.parallel_for(n, grain, [&](int64_t a, int64_t b) {
          if (a % grain != 0 || a >= b) misaligned = true;
          for (int64_t i = a; i < b; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " n " << n << " i " << i;
        }
        EXPECT_FALSE(misaligned.load()) << "threads " << threads << " n " << n;
      }
    }
  }
}

TEST(ThreadPool, ManyBackToBackJobsSumCorrectly) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  for (int job = 0; job < 3000; ++job) {
    pool.parallel_for(97, 1, [&](int64_t a, int64_t b) {
      int64_t s = 0;
      for (int64_t i = a; i < b; ++i) s += i;
      total.fetch_add(s);
    });
  }
  EXPECT_EQ(total.load(), int64_t{3000} * (96 * 97 / 2));
}

TEST(ThreadPool, CreateAndDestroyAtOnceNeverHangs) {
  for (int i = 0; i < 300; ++i) {
    ThreadPool pool(4);
    if (i % 2 == 0) {
      std::atomic<int> n{0};
      pool.parallel_for(8, 1, [&](int64_t a, int64_t b) { n += static_cast<int>(b - a); });
      ASSERT_EQ(n.load(), 8);
    }
  }
}

// Four threads on whatever cores CI has: tiny jobs must not wait on descheduled spinners.
// A pool that hands every chunk to a fixed thread and spins for it took seconds here.
TEST(ThreadPool, OversubscribedTinyJobsStayFast) {
  ThreadPool pool(4 * available_cores());
  std::vector<float> v(4096, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  for (int job = 0; job < 2000; ++job) {
    pool.parallel_for(static_cast<int64_t>(v.size()), 64, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) v[i] *= 1.0001f;
    });
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_GT(v[0], 1.0f);
}

}  // namespace
}  // namespace hearth::kernels::cpu
