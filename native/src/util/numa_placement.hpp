// Which host CPUs sit near a PCI device (a GPU), as Linux's sysfs tells, and pinning threads to
// them; no libnuma. A GPU's PCI bus id (cudaDeviceGetPCIBusId) names
// <sysfs>/bus/pci/devices/<id>/numa_node, whose node N lists its CPUs in
// <sysfs>/devices/system/node/nodeN/cpulist. Anything missing, unreadable or malformed means
// "unknown": an empty CPU list, and the caller leaves its threads where the OS puts them.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ooc {

// A kernel CPU list ("0-3,8,10-11\n") in order; empty for malformed or empty text.
std::vector<int> parse_cpu_list(const std::string& text);
// A numa_node file's node ("1\n"); nullopt for -1 (the machine does not tell) or malformed text.
std::optional<int> parse_numa_node(const std::string& text);
// The sysfs directory name of a PCI bus id: cudaDeviceGetPCIBusId writes "0000:3B:00.0", sysfs
// spells it in lower case.
std::string pci_sysfs_name(const std::string& bus_id);
// The CPUs of the NUMA node of the PCI device `bus_id`, read under `sysfs_root`; empty: unknown.
std::vector<int> cpus_near_pci_device(const std::string& bus_id, const std::string& sysfs_root = "/sys");

// Restricts the calling thread to `cpus` (sched_setaffinity). False, changing nothing, when the
// list is empty or the OS refuses it (a CPU outside this process's cpuset).
bool pin_this_thread(const std::vector<int>& cpus) noexcept;
// The CPUs the calling thread may run on (sched_getaffinity); empty when the OS does not say.
std::vector<int> this_thread_cpus();
// Those of `cpus` the calling thread may run on (a container's cpuset may hold part of a node, or
// none of it); `cpus` itself where the OS does not say.
std::vector<int> usable_cpus(const std::vector<int>& cpus);

}  // namespace ooc
