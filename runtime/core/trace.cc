// The per-rank trace ring and its Chrome-trace file (rt_dist/trace.h).
#include "rt_dist/trace.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/core/config.h"

#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define RTD_HAVE_NVTX 1
#endif

namespace rtd::trace {
namespace {

struct Event {
  std::string name, category, track, args;
  std::int64_t start_us = 0, end_us = 0;
};

// Read once: RTD_TRACE_DIR, RTD_TRACE_EVENTS, and this process's rank.
class Recorder {
 public:
  static Recorder& get() {
    static Recorder* r = new Recorder();  // never destroyed: flushed by atexit
    return *r;
  }
  bool on() const { return !dir_.empty(); }

  void add(Event e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ring_.size() < capacity_) {
      ring_.push_back(std::move(e));
    } else {
      ring_[next_] = std::move(e);  // the oldest goes
      next_ = (next_ + 1) % capacity_;
      ++dropped_;
    }
  }

  void write() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!on() || ring_.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    const std::string path = dir_ + "/rank_" + std::to_string(rank_) + ".json";
    std::ofstream out(path + ".tmp");
    if (!out) {  // dtrun checked the directory at start; this rank cannot write it now
      std::fprintf(stderr, "rt_dist: rank %d: cannot write its trace to %s.tmp\n", rank_,
                   path.c_str());
      return;
    }
    // One event per line between the header and the footer: dtrun merges the
    // ranks' files line by line.
    out << "{\"traceEvents\":[\n";
    out << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << rank_
        << ",\"args\":{\"name\":\"rank " << rank_ << "\"}},\n";
    out << "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" << rank_
        << ",\"args\":{\"sort_index\":" << rank_ << "}}";
    // Rows are numbered (the format's tid is a number) and named by metadata.
    std::map<std::string, int> tids;
    for (const Event& e : ring_) tids.emplace(e.track, 0);
    int next_tid = 1;
    for (auto& [track, tid] : tids) {
      tid = next_tid++;
      out << ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << rank_ << ",\"tid\":" << tid
          << ",\"args\":{\"name\":\"" << escape(track) << "\"}}";
    }
    for (std::size_t i = 0; i < ring_.size(); ++i) {
      const Event& e = ring_[(next_ + i) % ring_.size()];
      out << ",\n{\"ph\":\"X\",\"pid\":" << rank_ << ",\"tid\":" << tids[e.track] << ",\"name\":\""
          << escape(e.name) << "\",\"cat\":\"" << escape(e.category) << "\",\"ts\":" << e.start_us
          << ",\"dur\":" << (e.end_us - e.start_us);
      if (!e.args.empty()) out << ",\"args\":{\"detail\":\"" << escape(e.args) << "\"}";
      out << "}";
    }
    // Which job and round wrote it: dtrun merges only the files of its own.
    out << "\n],\"otherData\":{\"rank\":" << rank_ << ",\"dropped_events\":" << dropped_
        << ",\"run\":\"" << escape(run_) << "\",\"restart\":" << restart_ << ",\"world\":" << world_
        << "}}\n";
    out.close();
    if (!out) {
      std::fprintf(stderr, "rt_dist: rank %d: writing its trace %s.tmp failed (disk full?)\n",
                   rank_, path.c_str());
      return;
    }
    std::filesystem::rename(path + ".tmp", path, ec);
  }

 private:
  Recorder() {
    const EnvMap env = read_process_env();
    const TraceSettings settings = trace_settings_from_env(env);
    dir_ = settings.dir;
    capacity_ = static_cast<std::size_t>(settings.events);
    // The rank as the launcher set it (dtrun, torchrun, mpirun or srun).
    for (const char* key : {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
      auto it = env.find(key);
      if (it != env.end()) {
        rank_ = std::atoi(it->second.c_str());
        break;
      }
    }
    // The job and round (dtrun and torchrun set these).
    auto get = [&](const char* key) {
      auto it = env.find(key);
      return it == env.end() ? std::string() : it->second;
    };
    run_ = get("TORCHELASTIC_RUN_ID");
    restart_ = std::atoi(get("TORCHELASTIC_RESTART_COUNT").c_str());
    world_ = std::atoi(get("WORLD_SIZE").c_str());
    if (on()) {
      ring_.reserve(std::min<std::size_t>(capacity_, 1 << 16));
      std::atexit([] { Recorder::get().write(); });
    }
  }

  static std::string escape(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
    return out;
  }

  std::string dir_;
  int rank_ = 0;
  std::string run_;  // TORCHELASTIC_RUN_ID: the job
  int restart_ = 0;  // TORCHELASTIC_RESTART_COUNT
  int world_ = 0;    // WORLD_SIZE
  std::size_t capacity_ = 200000;
  std::mutex mu_;
  std::vector<Event> ring_;
  std::size_t next_ = 0;  // the oldest event once the ring is full
  std::uint64_t dropped_ = 0;
};

// Each thread's row: "thread 1", "thread 2", ... in the order they first record.
const std::string& thread_track() {
  static std::atomic<int> threads{0};
  static thread_local const std::string name = "thread " + std::to_string(++threads);
  return name;
}

}  // namespace

bool enabled() { return Recorder::get().on(); }

std::int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Scope::Scope(const char* name, const char* category) : name_(name), category_(category) {
#ifdef RTD_HAVE_NVTX
  nvtxRangePushA(name);
#endif
  if (Recorder::get().on()) start_us_ = now_us();
}

Scope::~Scope() {
#ifdef RTD_HAVE_NVTX
  nvtxRangePop();
#endif
  if (start_us_ >= 0)
    Recorder::get().add(Event{name_, category_, thread_track(), "", start_us_, now_us()});
}

void span(const std::string& name, const std::string& category, const std::string& track,
          std::int64_t start_us, std::int64_t end_us, const std::string& detail) {
  if (Recorder::get().on())
    Recorder::get().add(Event{name, category, track, detail, start_us, end_us});
}

void flush() { Recorder::get().write(); }

}  // namespace rtd::trace
