// Table and JSON output of the collective benchmark.
#include "bench/common/report.h"

#include <cstdio>
#include <fstream>

namespace rtd::bench {

double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;
}

Row make_row(const std::string& op, DType dtype, std::size_t bytes, double time_us, int ranks,
             long long wrong) {
  double algbw = time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e3) : 0.0;
  return Row{
      op,   dtype, bytes, bytes / dtype_size(dtype), time_us, algbw, algbw * bus_factor(op, ranks),
      wrong};
}

void print_header(const std::string& title) {
  std::printf("# %s\n", title.c_str());
  std::printf("%-19s %-9s %12s %12s %10s %10s %10s %6s %8s\n", "op", "dtype", "bytes", "count",
              "time_us", "algbw", "busbw", "wrong", "host_us");
}

void print_row(const Row& r) {
  char host[16] = "-";
  if (r.host_us >= 0) std::snprintf(host, sizeof(host), "%.2f", r.host_us);
  std::printf("%-19s %-9s %12zu %12zu %10.2f %10.2f %10.2f %6lld %8s\n", r.op.c_str(),
              std::string(to_string(r.dtype)).c_str(), r.bytes, r.count, r.time_us, r.algbw_gbs,
              r.busbw_gbs, r.wrong, host);
  std::fflush(stdout);
}

void write_json(const std::string& path, const std::string& mode, const std::string& label,
                int ranks, const std::vector<Row>& rows) {
  std::ofstream out(path);
  out << "{\"mode\": \"" << mode << "\", \"label\": \"" << label << "\", \"ranks\": " << ranks
      << ", \"rows\": [\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out << "  {\"op\": \"" << r.op << "\", \"dtype\": \"" << to_string(r.dtype)
        << "\", \"bytes\": " << r.bytes << ", \"count\": " << r.count
        << ", \"time_us\": " << r.time_us << ", \"algbw_gbs\": " << r.algbw_gbs
        << ", \"busbw_gbs\": " << r.busbw_gbs << ", \"wrong\": " << r.wrong
        << ", \"host_us\": " << r.host_us << "}" << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  out << "]}\n";
}

}  // namespace rtd::bench
