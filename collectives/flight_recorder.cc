// FlightRecorder: the ring, its reports in the store, and the comparison that
// turns every rank's report into a diagnosis.
#include "collectives/flight_recorder.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "rt_dist/trace.h"
#include "runtime/core/log.h"

namespace rtd {
// "0, 2-5, 7"
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

namespace {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string call_text(const FlightRecorder::Call& c) {
  return "#" + std::to_string(c.seq) + " " + c.op + (c.args.empty() ? "" : " (" + c.args + ")");
}

std::string seconds(std::int64_t ms) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", std::max<std::int64_t>(0, ms) / 1e3);
  return text;
}

std::string age(std::int64_t then_ms, std::int64_t now) { return seconds(now - then_ms) + " ago"; }

// Strips what would break the line-and-tab encoding.
std::string clean(std::string s) {
  std::replace_if(
      s.begin(), s.end(), [](char c) { return c == '\t' || c == '\n'; }, ' ');
  return s;
}

}  // namespace

std::string call_args(const BufferView& buf, const std::string& extra) {
  return std::string(to_string(buf.dtype)) + " x " + std::to_string(buf.count) +
         (extra.empty() ? "" : ", " + extra);
}

std::string CallArgs::text() const {
  if (!has_buffer) return "";
  std::string out = std::string(to_string(dtype)) + " x " + std::to_string(count);
  if (reduces) out += ", " + std::string(to_string(op));
  if (root >= 0) out += ", root " + std::to_string(root);
  return out;
}

namespace describe {
namespace {
CallArgs of(const BufferView& buf) {
  return CallArgs{.count = buf.count, .dtype = buf.dtype, .has_buffer = true};
}
CallArgs reducing(const BufferView& buf, ReduceOp op) {
  CallArgs args = of(buf);
  args.reduces = true;
  args.op = op;
  return args;
}
}  // namespace
CallDescription all_reduce(const BufferView& in, ReduceOp op) {
  return {"all_reduce", reducing(in, op)};
}
CallDescription broadcast(const BufferView& buf, int root) {
  CallArgs args = of(buf);
  args.root = root;
  return {"broadcast", args};
}
CallDescription all_gather(const BufferView& in) { return {"all_gather", of(in)}; }
CallDescription reduce_scatter(const BufferView& out, ReduceOp op) {
  return {"reduce_scatter", reducing(out, op)};
}
CallDescription all_to_all(const BufferView& in) { return {"all_to_all", of(in)}; }
CallDescription barrier() { return {"barrier", CallArgs{}}; }
}  // namespace describe

FlightRecorder::FlightRecorder(std::shared_ptr<Store> store, int rank, int size,
                               std::chrono::milliseconds publish_every, FlightOptions options,
                               std::function<void(const std::string&)> on_hang)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      publish_every_(publish_every),
      warn_after_(options.hang_warn),
      on_hang_(std::move(on_hang)),
      ring_(std::make_unique<Entry[]>(kCapacity)),
      traced_(trace::enabled()) {
  static std::atomic<int> communicators{0};
  trace_track_ = "comm " + std::to_string(communicators++);
  if (!options.dump_dir.empty()) {
    static std::atomic<int> recorders{0};  // one file per communicator of this process
    const bool slash = options.dump_dir.back() == '/';
    dump_path_ = options.dump_dir + (slash ? "" : "/") + "flight-rank" + std::to_string(rank) +
                 "-comm" + std::to_string(recorders++) + ".txt";
  }
  if (!on_hang_) {
    on_hang_ = [](const std::string& text) { log::get("flight")->warn("{}", text); };
  }
  if (!store_) return;
  if (auto bounded = store_->bounded(options.store_limit)) store_ = std::move(bounded);
  // An empty report at once: a peer that never calls anything still says so.
  try {
    store_->set(key(rank_), encode(Report{.published_ms = now_ms()}));
  } catch (const std::exception& e) {
    log::get("flight")->warn("rank {}: first report not published: {}", rank_, e.what());
  }
  publisher_ = std::thread([this] { publisher_loop(); });
}

FlightRecorder::~FlightRecorder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (publisher_.joinable()) publisher_.join();
}

std::string FlightRecorder::key(int rank) const { return "flight/" + std::to_string(rank); }

FlightRecorder::Texts& FlightRecorder::Entry::own_texts() {
  if (!texts) {
    texts = std::make_unique<Texts>();
  } else if (!has_texts.load(std::memory_order_relaxed)) {  // an earlier call's: cleared
    texts->op_text.clear();
    texts->args_text.clear();
    texts->at_us = 0;
    texts->trace_note.clear();
  }
  has_texts.store(true, std::memory_order_relaxed);
  return *texts;
}

// CallArgs in two words: count, and dtype | op << 8 | has_buffer << 16 |
// reduces << 17 | root << 32.
inline void FlightRecorder::Entry::set_args(const CallArgs& a) {
  count.store(a.count, std::memory_order_relaxed);
  packed.store(static_cast<std::uint64_t>(a.dtype) | static_cast<std::uint64_t>(a.op) << 8 |
                   static_cast<std::uint64_t>(a.has_buffer) << 16 |
                   static_cast<std::uint64_t>(a.reduces) << 17 |
                   static_cast<std::uint64_t>(static_cast<std::uint32_t>(a.root)) << 32,
               std::memory_order_relaxed);
}

CallArgs FlightRecorder::Entry::args() const {
  const std::uint64_t p = packed.load(std::memory_order_relaxed);
  return CallArgs{.count = count.load(std::memory_order_relaxed),
                  .dtype = static_cast<DType>(p & 0xff),
                  .op = static_cast<ReduceOp>(p >> 8 & 0xff),
                  .root = static_cast<int>(static_cast<std::uint32_t>(p >> 32)),
                  .has_buffer = (p >> 16 & 1) != 0,
                  .reduces = (p >> 17 & 1) != 0};
}

const FlightRecorder::Entry* FlightRecorder::slot(std::uint64_t seq) const {
  const std::uint64_t next = next_seq_.load(std::memory_order_acquire);
  if (seq == 0 || seq < oldest_seq(next) || seq >= next) return nullptr;
  return &ring_[(seq - 1) % kCapacity];
}

inline FlightRecorder::Entry& FlightRecorder::begin_entry(std::uint64_t seq) {
  Entry& e = ring_[(seq - 1) % kCapacity];
  e.state.store(0, std::memory_order_relaxed);
  // Readers that see any field below see the 0 above (store-store order).
  std::atomic_thread_fence(std::memory_order_release);
  e.op.store(nullptr, std::memory_order_relaxed);
  e.has_texts.store(false, std::memory_order_relaxed);          // the texts' storage stays
  e.at_ms.store(coarse::unix_ms(), std::memory_order_relaxed);  // for ages in seconds
  return e;
}

inline FlightRecorder::Entry& FlightRecorder::begin_plain(std::uint64_t seq, const char* op,
                                                          const CallArgs& args) {
  Entry& e = begin_entry(seq);
  e.op.store(op, std::memory_order_relaxed);
  e.set_args(args);
  return e;
}

inline std::uint64_t FlightRecorder::publish_entry(Entry& e, std::uint64_t seq) {
  e.state.store(seq << 1, std::memory_order_release);
  next_seq_.store(seq + 1, std::memory_order_release);
  return seq;
}

std::uint64_t FlightRecorder::record(const char* op, const CallArgs& args) {
  if (traced_) [[unlikely]] {  // the trace's start time lives in texts
    std::lock_guard<std::mutex> lock(mu_);
    return record_locked(op, args);
  }
  const std::uint64_t seq = next_seq_.load(std::memory_order_relaxed);
  return publish_entry(begin_plain(seq, op, args), seq);
}

std::uint64_t FlightRecorder::record_locked(const char* op, const CallArgs& args) {
  const std::uint64_t seq = next_seq_.load(std::memory_order_relaxed);
  Entry& e = begin_plain(seq, op, args);
  if (traced_) e.own_texts().at_us = trace::now_us();
  return publish_entry(e, seq);
}

std::uint64_t FlightRecorder::record(std::string op, std::string args) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t seq = next_seq_.load(std::memory_order_relaxed);
  Entry& e = begin_entry(seq);
  Texts& t = e.own_texts();
  t.op_text = clean(std::move(op));
  t.args_text = clean(std::move(args));
  if (traced_) t.at_us = trace::now_us();
  return publish_entry(e, seq);
}

std::optional<FlightRecorder::Call> FlightRecorder::read(std::uint64_t seq) const {
  const Entry* slot_of_seq = slot(seq);
  if (slot_of_seq == nullptr) return std::nullopt;
  const Entry& e = *slot_of_seq;
  if (e.state.load(std::memory_order_acquire) >> 1 != seq) return std::nullopt;
  const char* op = e.op.load(std::memory_order_relaxed);
  const CallArgs args = e.args();
  const std::int64_t at_ms = e.at_ms.load(std::memory_order_relaxed);
  const bool has_texts = e.has_texts.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  const std::uint64_t state = e.state.load(std::memory_order_relaxed);
  if (state >> 1 != seq) return std::nullopt;  // written over meanwhile: gone
  // Texts change under mu_ only, which the reader holds: whatever the caller
  // wrote since, these are still the call's.
  const Texts* t = has_texts ? e.texts.get() : nullptr;
  return Call{.seq = seq,
              .op = op != nullptr ? std::string(op)
                    : t           ? t->op_text
                                  : std::string(),
              .args = op != nullptr ? args.text()
                      : t           ? t->args_text
                                    : std::string(),
              .at_ms = at_ms,
              .done = (state & 1) != 0,
              .at_us = t ? t->at_us : 0,
              .trace_note = t ? t->trace_note : std::string()};
}

void FlightRecorder::completed(std::uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  complete(seq);
}

void FlightRecorder::completed(const std::vector<std::uint64_t>& seqs) {
  std::lock_guard<std::mutex> lock(mu_);
  for (std::uint64_t seq : seqs) complete(seq);
}

void FlightRecorder::complete(std::uint64_t seq) {
  Entry* e = slot(seq);
  if (!e) return;
  // Only if the entry still holds seq, not yet done (the caller may be
  // writing over it).
  std::uint64_t waiting = seq << 1;
  if (!e->state.compare_exchange_strong(waiting, waiting | 1, std::memory_order_acq_rel)) return;
  // In the trace: from the call until its completion was seen (on a GPU, by
  // the watchdog's poll of the collective's end event).
  if (!e->has_texts.load(std::memory_order_relaxed)) return;
  const std::optional<Call> c = read(seq);
  if (c && c->at_us > 0) {
    trace::span(c->op, "collective", trace_track_, c->at_us, trace::now_us(),
                c->trace_note.empty() ? c->args : c->args + ", " + c->trace_note);
  }
}

void FlightRecorder::annotate(std::uint64_t seq, std::string note) {
  if (!traced_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = slot(seq)) e->own_texts().trace_note = std::move(note);
}

void FlightRecorder::check_hang() {
  if (warn_after_.count() <= 0) return;
  std::optional<Call> oldest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::uint64_t next = next_seq_.load(std::memory_order_acquire);
    for (std::uint64_t seq = oldest_seq(next); seq < next; ++seq) {
      if (std::optional<Call> c = read(seq); c && !c->done) {
        oldest = std::move(c);
        break;
      }
    }
  }
  if (!oldest || oldest->seq <= warned_seq_ || now_ms() - oldest->at_ms < warn_after_.count())
    return;
  warned_seq_ = oldest->seq;
  std::string text = "rank " + std::to_string(rank_) + ": collective " + call_text(*oldest) +
                     " has waited " + seconds(now_ms() - oldest->at_ms) + " and is still waiting";
  if (std::string why = diagnose(oldest->seq); !why.empty()) text += "; " + why;
  on_hang_(text);
}

std::vector<FlightRecorder::Call> FlightRecorder::recent(std::size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t end = next_seq_.load(std::memory_order_acquire);
  const std::uint64_t begin =
      std::max<std::uint64_t>(oldest_seq(end), end - std::min<std::uint64_t>(n, end - 1));
  std::vector<Call> calls;
  calls.reserve(end - begin);
  for (std::uint64_t seq = begin; seq < end; ++seq) {
    if (std::optional<Call> c = read(seq)) calls.push_back(std::move(*c));  // else written over
  }
  return calls;
}

void FlightRecorder::publish() {
  if (!store_) return;
  std::lock_guard<std::mutex> one_at_a_time(publish_mu_);
  Report report{.published_ms = now_ms(), .calls = recent(kPublished)};
  if (report.calls.empty() || report.calls.back().seq == published_seq_) return;
  try {
    store_->set(key(rank_), encode(report));
    published_seq_ = report.calls.back().seq;
  } catch (const std::exception& e) {
    log::get("flight")->debug("rank {}: report not published: {}", rank_, e.what());
  }
}

void FlightRecorder::publisher_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, publish_every_, [&] { return stop_; });
    if (stop_) break;
    lock.unlock();
    publish();
    check_hang();
    lock.lock();
  }
}

std::string FlightRecorder::diagnose(std::uint64_t seq) {
  if (!store_) return "";
  std::optional<Call> mine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mine = read(seq);
  }
  if (!mine) return "";
  publish();  // so that peers diagnosing the same hang see this rank's newest call
  std::vector<std::optional<Report>> reports(size_);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    try {
      if (auto text = store_->try_get(key(r))) reports[r] = decode(*text);
    } catch (const std::exception& e) {
      return "flight recorder: peers' reports unreadable: " + std::string(e.what());
    }
  }
  std::string diagnosis = compare(rank_, *mine, reports, now_ms());
  dump(seq, diagnosis);
  return diagnosis;
}

void FlightRecorder::dump(std::uint64_t seq, const std::string& diagnosis) {
  if (dump_path_.empty()) return;
  std::lock_guard<std::mutex> one_at_a_time(dump_mu_);
  if (seq <= dumped_seq_) return;
  dumped_seq_ = seq;
  std::vector<Call> calls = recent(kCapacity);
  std::ofstream out(dump_path_, std::ios::trunc);
  out << "# flight recorder of rank " << rank_ << " of " << size_ << ", oldest first\n# "
      << diagnosis << "\n# seq\tcalled_at_ms\tstate\top\targs\n";
  for (const Call& c : calls) {
    out << c.seq << "\t" << c.at_ms << "\t" << (c.done ? "done" : "waiting") << "\t" << c.op << "\t"
        << c.args << "\n";
  }
  out.flush();
  if (!out) {
    log::get("flight")->warn("rank {}: could not write the flight recorder to {}", rank_,
                             dump_path_);
  } else {
    log::get("flight")->warn("rank {}: flight recorder written to {}", rank_, dump_path_);
  }
}

std::string FlightRecorder::encode(const Report& report) {
  std::string out = "published\t" + std::to_string(report.published_ms) + "\n";
  for (const Call& c : report.calls) {
    out +=
        std::to_string(c.seq) + "\t" + std::to_string(c.at_ms) + "\t" + c.op + "\t" + c.args + "\n";
  }
  return out;
}

std::optional<FlightRecorder::Report> FlightRecorder::decode(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  Report report;
  if (!std::getline(in, line) || line.rfind("published\t", 0) != 0) return std::nullopt;
  try {
    report.published_ms = std::stoll(line.substr(10));
    while (std::getline(in, line)) {
      std::vector<std::string> fields;
      std::istringstream cols(line);
      for (std::string f; std::getline(cols, f, '\t');) fields.push_back(f);
      if (fields.size() == 3) fields.emplace_back();  // no args
      if (fields.size() != 4) return std::nullopt;
      report.calls.push_back(Call{.seq = std::stoull(fields[0]),
                                  .op = fields[2],
                                  .args = fields[3],
                                  .at_ms = std::stoll(fields[1])});
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return report;
}

std::string FlightRecorder::compare(int rank, const Call& mine,
                                    const std::vector<std::optional<Report>>& reports,
                                    std::int64_t now) {
  std::vector<std::string> behind, other;
  std::vector<int> alike{rank}, past, silent;
  bool same_op = true;  // every other call in its place is the same operation
  for (int r = 0; r < static_cast<int>(reports.size()); ++r) {
    if (r == rank) continue;
    if (!reports[r]) {
      silent.push_back(r);
      continue;
    }
    const Report& rep = *reports[r];
    const std::string who = "rank " + std::to_string(r);
    if (rep.calls.empty() || rep.calls.back().seq < mine.seq) {
      behind.push_back(who +
                       (rep.calls.empty()
                            ? " has called no collective on this communicator"
                            : " has not called it; its last was " + call_text(rep.calls.back()) +
                                  ", called " + age(rep.calls.back().at_ms, now)) +
                       " (reported " + age(rep.published_ms, now) + ")");
      continue;
    }
    auto it = std::find_if(rep.calls.begin(), rep.calls.end(),
                           [&](const Call& c) { return c.seq == mine.seq; });
    if (it == rep.calls.end()) {
      past.push_back(r);
    } else if (it->op == mine.op && it->args == mine.args) {
      alike.push_back(r);
    } else {
      same_op = same_op && it->op == mine.op;
      other.push_back(who + " called " + call_text(*it) + " in its place");
    }
  }
  std::sort(alike.begin(), alike.end());
  std::string out = "flight recorder for " + call_text(mine) + ": ";
  std::vector<std::string> parts;
  constexpr std::size_t kNamed = 8;  // ranks described one by one; the rest counted
  auto add_all = [&](const std::vector<std::string>& lines, const char* rest) {
    for (std::size_t i = 0; i < lines.size() && i < kNamed; ++i) parts.push_back(lines[i]);
    if (lines.size() > kNamed)
      parts.push_back(std::to_string(lines.size() - kNamed) + " more ranks " + rest);
  };
  add_all(behind, "have not called it");
  add_all(other, "called something else in its place");
  if (!other.empty())
    parts.push_back(same_op ? "the ranks disagree on the call's sizes, dtype or options"
                            : "the ranks disagree on the order of collectives");
  if (!silent.empty())
    parts.push_back("no report from rank(s) " + rank_list(silent) +
                    " (exited, or never created this communicator)");
  if (!past.empty()) parts.push_back("rank(s) " + rank_list(past) + " already went past it");
  if (behind.empty() && other.empty() && silent.empty()) {
    parts.push_back("every rank called it alike (" + rank_list(alike) +
                    "): it waits on the GPU (work queued before it on a rank's stream) or on the "
                    "transport (a lost connection, a failed GPU or link)");
  } else {
    parts.push_back("called alike by rank(s) " + rank_list(alike));
  }
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out;
}

}  // namespace rtd
