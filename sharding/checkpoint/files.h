// The file operations a checkpoint's commit rests on: whole files written
// and fsynced, directories fsynced, atomic replacement by rename, and reads at
// an offset. Errors are rtd::Error naming the path and errno's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rtd::ckpt {

// A file made anew (whatever was under its name removed first; never through
// a symbolic link), written sequentially (write) or at offsets (write_at,
// from several threads at once); close() fsyncs it.
class FileWriter {
 public:
  explicit FileWriter(const std::string& path);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  void write(const void* data, std::size_t bytes);
  void write_at(std::size_t offset, const void* data, std::size_t bytes) const;
  std::size_t written() const { return written_; }  // by write()
  void close();                                     // fsync + close; throws on failure

 private:
  std::string path_;
  int fd_ = -1;
  std::size_t written_ = 0;
};

void fsync_dir(const std::string& dir);
// Makes `dir` (and its parents) and fsyncs each parent that gained an entry.
void create_dirs_durably(const std::string& dir);
// Swaps two directory entries at once (renameat2's RENAME_EXCHANGE): false
// where the filesystem cannot (then nothing moved).
bool exchange_entries(const std::string& a, const std::string& b);
// Throws rtd::Error(kConfig) naming the first entry of dir that is a symbolic link.
void refuse_links(const std::string& dir);
// Bytes free for an unprivileged writer on the filesystem of `path`; 0 when unknown.
std::uint64_t free_bytes(const std::string& path);

// The lock that makes a checkpoint directory one job's: an flock on
// <dir>/.lock, which names its holder (host, pid, when). The kernel drops
// it when the holder dies, so a lock left by a dead job is taken over.
class DirLock {
 public:
  // Throws rtd::Error(kConfig) naming the holder when another process (or
  // another Checkpointer of this one) holds it.
  explicit DirLock(const std::string& dir);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  // Non-empty when a holder that is gone left its line: that line.
  const std::string& taken_over() const { return taken_over_; }

 private:
  int fd_ = -1;
  std::string taken_over_;
};
// Writes `text` to path.tmp, fsyncs it, renames it over path, fsyncs the directory.
void replace_file(const std::string& path, const std::string& text);
std::string read_file(const std::string& path);

// A file read at offsets (pread, from several threads at once), its size known.
class FileReader {
 public:
  explicit FileReader(const std::string& path);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  std::size_t size() const { return size_; }
  // Throws when fewer than `bytes` bytes are there.
  void read(std::size_t offset, void* out, std::size_t bytes) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::size_t size_ = 0;
};

}  // namespace rtd::ckpt
