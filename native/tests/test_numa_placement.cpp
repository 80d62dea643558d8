// Host workers near each GPU (util/numa_placement.hpp): sysfs's CPU lists and NUMA node files
// parsed from fixture strings, a GPU's CPUs found in a fixture sysfs tree (and "unknown" wherever
// a file is missing or says -1), threads pinned to CPUs, and a device's pools (pinned workers,
// chosen per thread by UseDevicePools).
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "util/numa_placement.hpp"
#include "util/thread_pool.hpp"

namespace {

using ooc::parse_cpu_list;
using ooc::parse_numa_node;

TEST(NumaPlacement, ParsesKernelCpuLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5"), (std::vector<int>{5}));
  EXPECT_EQ(parse_cpu_list("48-63,112-127\n").size(), 32u);
  EXPECT_EQ(parse_cpu_list("3,1-2,2"), (std::vector<int>{1, 2, 3})) << "sorted, each CPU once";
  for (const char* bad : {"", "\n", "a", "1-", "-1", "3-1", "1,,2", "1-2-3", "0x1", "1 2"})
    EXPECT_TRUE(parse_cpu_list(bad).empty()) << "'" << bad << "'";
}

TEST(NumaPlacement, ParsesNumaNodeFiles) {
  EXPECT_EQ(parse_numa_node("1\n"), 1);
  EXPECT_EQ(parse_numa_node("0"), 0);
  for (const char* unknown : {"-1\n", "", "node1", "1.5"}) EXPECT_FALSE(parse_numa_node(unknown)) << unknown;
}

TEST(NumaPlacement, SysfsSpellsBusIdsInLowerCase) {
  EXPECT_EQ(ooc::pci_sysfs_name("00000000:3B:00.0"), "00000000:3b:00.0");
  EXPECT_EQ(ooc::pci_sysfs_name("0000:C1:00.0\n"), "0000:c1:00.0");
}

// A fixture sysfs: GPU 0000:3b:00.0 on node 1, GPU 0000:c1:00.0 whose node is unknown (-1), GPU
// 0000:da:00.0 on node 2, which has no cpulist.
class FixtureSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("ooc_sysfs_" + std::to_string(::getpid()));
    write("bus/pci/devices/0000:3b:00.0/numa_node", "1\n");
    write("bus/pci/devices/0000:c1:00.0/numa_node", "-1\n");
    write("bus/pci/devices/0000:da:00.0/numa_node", "2\n");
    write("devices/system/node/node0/cpulist", "0-7,16-23\n");
    write("devices/system/node/node1/cpulist", "8-15,24-31\n");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void write(const std::string& path, const std::string& text) {
    std::filesystem::create_directories((root_ / path).parent_path());
    std::ofstream(root_ / path) << text;
  }
  std::vector<int> near(const std::string& bus_id) { return ooc::cpus_near_pci_device(bus_id, root_.string()); }
  std::filesystem::path root_;
};

TEST_F(FixtureSysfs, FindsTheCpusOfAGpusNode) {
  EXPECT_EQ(near("0000:3B:00.0"), (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}));
}

TEST_F(FixtureSysfs, UnknownWhereTheMachineDoesNotTell) {
  EXPECT_TRUE(near("0000:C1:00.0").empty()) << "numa_node -1";
  EXPECT_TRUE(near("0000:DA:00.0").empty()) << "a node without a cpulist";
  EXPECT_TRUE(near("0000:01:00.0").empty()) << "no such device";
  EXPECT_TRUE(near("").empty());
  EXPECT_TRUE(near("../../devices/system/node/node0").empty()) << "a bus id is no path";
}

// This machine's own sysfs, read the way a GPU's is: every PCI device's CPUs are its numa_node's
// cpulist, or unknown where numa_node says -1 (virtual machines often do).
TEST(NumaPlacement, ThisMachinesPciDevices) {
  const std::filesystem::path devices("/sys/bus/pci/devices");
  if (!std::filesystem::exists(devices)) GTEST_SKIP() << "no sysfs PCI devices here";
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(devices)) {
    std::ifstream node_file(entry.path() / "numa_node");
    std::string node;
    if (!std::getline(node_file, node)) continue;
    const std::vector<int> near = ooc::cpus_near_pci_device(entry.path().filename().string());
    SCOPED_TRACE(entry.path().string() + ": numa_node " + node);
    if (node == "-1") {
      EXPECT_TRUE(near.empty());
    } else {
      std::ifstream cpus_file("/sys/devices/system/node/node" + node + "/cpulist");
      std::string cpus;
      std::getline(cpus_file, cpus);
      EXPECT_EQ(near, parse_cpu_list(cpus));
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// The first CPU this process may use: pinning to it is always allowed.
int an_allowed_cpu() {
  const std::vector<int> cpus = ooc::this_thread_cpus();
  return cpus.empty() ? -1 : cpus.front();
}

TEST(NumaPlacement, PinsAThreadAndRefusesWhatItCannot) {
  const int cpu = an_allowed_cpu();
  ASSERT_GE(cpu, 0);
  std::thread([cpu] {
    EXPECT_TRUE(ooc::pin_this_thread({cpu}));
    EXPECT_EQ(ooc::this_thread_cpus(), std::vector<int>{cpu});
    EXPECT_FALSE(ooc::pin_this_thread({})) << "an empty list changes nothing";
    EXPECT_FALSE(ooc::pin_this_thread({-1}));
    EXPECT_EQ(ooc::this_thread_cpus(), std::vector<int>{cpu});
  }).join();
}

// A node's CPUs that this process's cpuset leaves out are not used (nor sized for).
TEST(NumaPlacement, OnlyTheCpusThisProcessMayUseAreUsable) {
  const std::vector<int> allowed = ooc::this_thread_cpus();
  ASSERT_FALSE(allowed.empty());
  const int outside = allowed.back() + 1;  // not in this thread's set, whether or not it exists
  EXPECT_EQ(ooc::usable_cpus({allowed.front(), outside}), std::vector<int>{allowed.front()});
  EXPECT_TRUE(ooc::usable_cpus({outside}).empty());
  EXPECT_EQ(ooc::usable_cpus(allowed), allowed);
}

// Every worker of a pool made with CPUs runs its blocks there; the calling thread, which takes
// blocks too, keeps its own affinity.
TEST(NumaPlacement, PoolWorkersArePinned) {
  const int cpu = an_allowed_cpu();
  ASSERT_GE(cpu, 0);
  ooc::ThreadPool pool(3, {cpu});
  const std::thread::id caller = std::this_thread::get_id();
  std::mutex mutex;
  std::set<std::thread::id> workers;
  int unpinned = 0;
  for (int round = 0; round < 50 && workers.size() < 2; ++round)
    pool.parallel_for(64, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      const bool pinned = ooc::this_thread_cpus() == std::vector<int>{cpu};
      std::lock_guard<std::mutex> lock(mutex);
      if (std::this_thread::get_id() == caller) return;
      workers.insert(std::this_thread::get_id());
      unpinned += !pinned;
    });
  EXPECT_EQ(workers.size(), 2u) << "both workers took blocks";
  EXPECT_EQ(unpinned, 0);
}

// UseDevicePools: shared() and scatter_shared() are the device's on this thread only, the
// process's again afterwards; the device's workers, pinned, use the device's pools too.
TEST(NumaPlacement, DevicePoolsServeTheThreadThatUsesThem) {
  const int cpu = an_allowed_cpu();
  ASSERT_GE(cpu, 0);
  ooc::ThreadPool& process = ooc::ThreadPool::shared();
  ooc::ThreadPool& process_scatter = ooc::ThreadPool::scatter_shared();
  ooc::DevicePools device({cpu, cpu});  // sized for two CPUs (a worker beside the caller), both the one allowed
  ASSERT_EQ(device.gather.size(), 2);
  {
    ooc::UseDevicePools use(&device);
    EXPECT_EQ(&ooc::ThreadPool::shared(), &device.gather);
    EXPECT_EQ(&ooc::ThreadPool::scatter_shared(), &device.scatter);
    std::thread([&] { EXPECT_EQ(&ooc::ThreadPool::shared(), &process) << "other threads keep the process's"; }).join();
    {
      ooc::UseDevicePools none(nullptr);
      EXPECT_EQ(&ooc::ThreadPool::shared(), &process);
    }
    EXPECT_EQ(&ooc::ThreadPool::shared(), &device.gather) << "nested scopes restore the outer choice";
    const std::thread::id caller = std::this_thread::get_id();
    std::atomic<int> on_device{0}, worker_blocks{0}, pinned{0}, blocks{0};
    device.gather.parallel_for(200, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ++blocks;
      on_device += &ooc::ThreadPool::shared() == &device.gather;
      if (std::this_thread::get_id() == caller) return;
      ++worker_blocks;
      pinned += ooc::this_thread_cpus() == std::vector<int>{cpu};
    });
    EXPECT_EQ(on_device.load(), blocks.load()) << "the caller (inside the scope) and the workers all see the device's";
    EXPECT_EQ(pinned.load(), worker_blocks.load()) << "the device's workers run on its CPUs";
  }
  EXPECT_EQ(&ooc::ThreadPool::shared(), &process);
  EXPECT_EQ(&ooc::ThreadPool::scatter_shared(), &process_scatter);
}

}  // namespace
