#include "util/numa_placement.hpp"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

namespace ooc {
namespace {

// A CPU list's number: digits only, small enough for cpu_set_t's indices to be meaningful.
std::optional<int> parse_index(const std::string& s) {
  if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }))
    return std::nullopt;
  return std::stoi(s);
}

std::string trimmed(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r\n"), end = text.find_last_not_of(" \t\r\n");
  return begin == std::string::npos ? std::string() : text.substr(begin, end - begin + 1);
}

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream items(trimmed(text));
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t dash = item.find('-');
    const std::optional<int> first = parse_index(item.substr(0, dash));
    const std::optional<int> last = dash == std::string::npos ? first : parse_index(item.substr(dash + 1));
    if (!first || !last || *last < *first) return {};
    for (int c = *first; c <= *last; ++c) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::optional<int> parse_numa_node(const std::string& text) { return parse_index(trimmed(text)); }

std::string pci_sysfs_name(const std::string& bus_id) {
  std::string name = trimmed(bus_id);
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name;
}

std::vector<int> cpus_near_pci_device(const std::string& bus_id, const std::string& sysfs_root) {
  const std::string name = pci_sysfs_name(bus_id);
  if (name.empty() || name.find('/') != std::string::npos) return {};
  const std::optional<std::string> node_text = read_text(sysfs_root + "/bus/pci/devices/" + name + "/numa_node");
  const std::optional<int> node = node_text ? parse_numa_node(*node_text) : std::nullopt;
  if (!node) return {};
  const std::optional<std::string> cpus =
      read_text(sysfs_root + "/devices/system/node/node" + std::to_string(*node) + "/cpulist");
  return cpus ? parse_cpu_list(*cpus) : std::vector<int>{};
}

bool pin_this_thread(const std::vector<int>& cpus) noexcept {
  if (cpus.empty()) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE) return false;
    CPU_SET(c, &set);
  }
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

std::vector<int> this_thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

std::vector<int> usable_cpus(const std::vector<int>& cpus) {
  const std::vector<int> allowed = this_thread_cpus();
  if (allowed.empty()) return cpus;
  std::vector<int> usable;
  for (int c : cpus)
    if (std::binary_search(allowed.begin(), allowed.end(), c)) usable.push_back(c);
  return usable;
}

}  // namespace ooc
