// POSIX file operations for the checkpoint commit.
#include "sharding/checkpoint/files.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <vector>

#include "rt_dist/error.h"

namespace rtd::ckpt {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  const int err = errno;
  throw Error(ErrorCategory::kBackend, what + " " + path + ": " + std::strerror(err), err);
}

}  // namespace

// A checkpoint directory may be shared or restored from elsewhere: a link
// planted in it must not make the trainer (often root) write or read another
// file. Files are made anew (a name already there, link or not, is removed
// first: unlink removes the link, not what it points to) and opened with
// O_EXCL and O_NOFOLLOW; reads refuse a link too.
FileWriter::FileWriter(const std::string& path) : path_(path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) fail("cannot replace", path);
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create", path);
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void FileWriter::write(const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write", path_);
    p += n;
    bytes -= static_cast<std::size_t>(n);
    written_ += static_cast<std::size_t>(n);
  }
}

void FileWriter::write_at(std::size_t offset, const void* data, std::size_t bytes) const {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write", path_);
    p += n;
    offset += static_cast<std::size_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
}

void FileWriter::close() {
  if (::fsync(fd_) != 0) fail("cannot fsync", path_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", path_);
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open directory", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail("cannot fsync directory", dir);
}

void create_dirs_durably(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path path = fs::absolute(dir).lexically_normal();
  std::vector<fs::path> missing;
  for (fs::path p = path; !p.empty() && !fs::exists(p); p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) fail("cannot create directory", *it);
    fsync_dir(it->parent_path().string());
  }
}

bool exchange_entries(const std::string& a, const std::string& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) return false;
  fail("cannot exchange " + a + " and", b);
}

void refuse_links(const std::string& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_symlink())
      throw Error(ErrorCategory::kConfig,
                  "checkpoint directory " + dir + " holds a symbolic link, " +
                      entry.path().filename().string() +
                      ": a checkpoint directory holds none (it may have been tampered with); "
                      "remove it, or use another directory");
  }
}

std::uint64_t free_bytes(const std::string& path) {
  struct statvfs s {};
  if (::statvfs(path.c_str(), &s) != 0) return 0;
  return static_cast<std::uint64_t>(s.f_bavail) * s.f_frsize;
}

namespace {
std::string holder_line() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::time_t now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return std::string("host ") + host + ", pid " + std::to_string(::getpid()) + ", since " + when;
}
}  // namespace

DirLock::DirLock(const std::string& dir) {
  const std::string path = dir + "/.lock";
  // Never through a link, never a file with another name too (a hard link
  // to a file elsewhere), never anything but a plain file: the lock is
  // truncated and written.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    if (errno == ELOOP)
      throw Error(ErrorCategory::kConfig, "checkpoint directory " + dir +
                                              ": its .lock is a symbolic link; remove it (the "
                                              "directory may have been tampered with)");
    fail("cannot open the lock", path);
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    ::close(fd_);
    fd_ = -1;
    throw Error(ErrorCategory::kConfig, "checkpoint directory " + dir +
                                            ": its .lock is not a plain file of its own (a "
                                            "device, a pipe or a hard link); remove it");
  }
  std::string before;
  char text[512];
  const ssize_t n = ::pread(fd_, text, sizeof(text) - 1, 0);
  if (n > 0) before.assign(text, static_cast<std::size_t>(n));
  while (!before.empty() && (before.back() == '\n' || before.back() == '\0')) before.pop_back();
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) {
      errno = err;
      fail("cannot lock", path);
    }
    throw Error(ErrorCategory::kConfig,
                "checkpoint directory " + dir + " is in use by another job (" +
                    (before.empty() ? std::string("holder unknown") : before) +
                    "); give each job its own checkpoint directory, or stop the other job");
  }
  taken_over_ = before;
  const std::string mine = holder_line() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, mine.data(), mine.size(), 0) < 0)
    fail("cannot write the lock", path);
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  // Emptied on a clean end; the lock itself goes with the descriptor.
  [[maybe_unused]] const int rc = ::ftruncate(fd_, 0);
  ::close(fd_);
}

void replace_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FileWriter w(tmp);
  w.write(text.data(), text.size());
  w.close();
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("cannot rename " + tmp + " to", path);
  fsync_dir(std::filesystem::path(path).parent_path().string());
}

std::string read_file(const std::string& path) {
  FileReader r(path);
  std::string text(r.size(), '\0');
  r.read(0, text.data(), text.size());
  return text;
}

FileReader::FileReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd_ < 0) fail(errno == ELOOP ? "refusing a symbolic link:" : "cannot open", path);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("cannot stat", path);
  size_ = static_cast<std::size_t>(st.st_size);
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);  // a larger readahead window
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

void FileReader::read(std::size_t offset, void* out, std::size_t bytes) const {
  char* p = static_cast<char*>(out);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot read", path_);
    if (n == 0) {
      throw Error(ErrorCategory::kConfig,
                  "file " + path_ + " is truncated: it ends at byte " + std::to_string(offset) +
                      ", " + std::to_string(bytes) + " bytes short of what the manifest says");
    }
    p += n;
    offset += static_cast<std::size_t>(n);
    bytes -= static_cast<std::size_t>(n);
  }
}

}  // namespace rtd::ckpt
