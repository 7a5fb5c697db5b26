// The platform layer: everything the library needs from the operating system that differs
// between POSIX (Linux) and Windows, behind one interface. os_posix.cpp and os_windows.cpp
// implement it; no other file of the library tests the OS with the preprocessor.
//
// Conventions: paths are UTF-8 (converted to UTF-16 for the wide Windows APIs). Calls that
// mirror a POSIX call return 0 / a descriptor / a pointer on success and -1 / nullptr on
// failure with errno set (on Windows, the system error mapped to the nearest errno value), so
// callers keep one error path and std::strerror for the message.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>

namespace llmkv::os {

// ---- read-only file mappings (model files, snapshots) ------------------------------------

struct FileMap {
    const uint8_t *data = nullptr;  // nullptr for an empty file
    size_t size = 0;
    void *handle = nullptr;  // the OS mapping object where the OS has one
};

enum class MapError { kNone, kOpen, kStat, kNotRegular, kMap };

// Maps the whole regular file at `path` read-only (private). On failure returns which step
// failed with errno set (kNotRegular: errno untouched) and leaves `out` empty. An empty file
// succeeds with data nullptr. `fail_map` makes the mapping step fail with ENOMEM (fault
// injection) after the file was opened, so callers can test that path.
MapError map_file(const std::string &path, FileMap &out, bool fail_map = false);
void unmap_file(FileMap &m) noexcept;
// Drops the resident pages of [p, p + n) inside a read-only private file mapping (advice: the
// pages are reread from the file on the next touch; failure changes nothing).
void drop_file_pages(const void *p, size_t n) noexcept;
size_t page_size() noexcept;

// ---- anonymous memory (KV pool slabs, the host tier) -------------------------------------

// Zero-filled read-write memory whose pages cost nothing until touched. nullptr + errno on
// failure. Free with release_memory(p, bytes).
void *map_memory(size_t bytes);
// Like map_memory with a start aligned to `alignment` (a power of two).
void *map_memory_aligned(size_t bytes, size_t alignment);
void release_memory(void *p, size_t bytes) noexcept;
// Returns the pages of [p, p + bytes) (inside map_memory_aligned memory) to the OS while
// keeping the address range reserved, and makes them usable (zeroed) again.
bool decommit_memory(void *p, size_t bytes) noexcept;
bool recommit_memory(void *p, size_t bytes) noexcept;
// Keeps the range out of child processes (fork); no-op where processes do not fork.
void exclude_from_children(void *p, size_t bytes) noexcept;
// Pins the range in RAM (mlock / VirtualLock). 0, or -1 with errno.
int lock_memory(const void *p, size_t bytes) noexcept;
// How much memory the process may lock, as text for messages ("unlimited", "65536 bytes").
std::string lock_limit_text();
// The system call that locks ("mlock", "VirtualLock") and what to do when it fails, for
// messages.
const char *lock_function_name() noexcept;
const char *lock_advice() noexcept;

// ---- shared libraries --------------------------------------------------------------------

// File name of a shared library from its stem: "libllmkv-cuda.so" / "llmkv-cuda.dll".
std::string shared_library_file(const std::string &stem);
// File name of the mimalloc runtime the host tier loads ("libmimalloc.so.2" / "mimalloc.dll").
const char *mimalloc_library_file() noexcept;
// Loads a library with local symbols, resolving everything now; nullptr and `error` (naming
// the file) on failure. Libraries are never unloaded by the callers of this layer.
void *load_library(const std::string &path, std::string &error);
void *library_symbol(void *library, const char *name) noexcept;
void unload_library(void *library) noexcept;
// Directory of the binary (shared library or executable) that contains `address`; "" if
// unknown.
std::string directory_of_binary_containing(const void *address);

// ---- files (the snapshot writer) ---------------------------------------------------------

// Creates `path` for writing, failing if it exists (O_CREAT | O_EXCL); descriptor or -1.
int create_exclusive(const std::string &path);
// write(2) semantics: bytes written (possibly fewer than n) or -1.
int64_t write_some(int fd, const void *p, size_t n);
int sync_file(int fd);  // fsync / _commit
int close_file(int fd);
// Atomically replaces `to` with `from` (rename(2) / MoveFileEx REPLACE_EXISTING + WRITE_THROUGH).
int replace_file(const std::string &from, const std::string &to);
int remove_file(const std::string &path);
// Makes a completed rename in the directory of `path` durable (fsync of the directory where
// the OS needs it; nothing where the rename itself was written through).
void sync_parent_directory(const std::string &path) noexcept;
long process_id() noexcept;

// ---- threads and CPU ---------------------------------------------------------------------

// Futex-style waiting on a 32-bit atomic: blocks while `word` holds `expected` (may return
// spuriously; callers loop). Linux: std::atomic::wait (a futex). Windows: WaitOnAddress, not
// libstdc++'s portable fallback, which lost wake-ups under MinGW-w64 (GCC 12).
void wait_while_equal(const std::atomic<uint32_t> &word, uint32_t expected) noexcept;
void wake_one(std::atomic<uint32_t> &word) noexcept;
void wake_all(std::atomic<uint32_t> &word) noexcept;

// Lowers the calling thread's scheduling priority by `levels` nice steps (1..19), mapped to
// the nearest lower thread priority where the OS has no nice values. Returns false and
// `error` on failure.
bool lower_thread_priority(int levels, std::string &error);
// CPUID leaf/subleaf into regs[0..3] = eax, ebx, ecx, edx; false off x86 or for a leaf
// beyond the maximum.
bool cpuid(uint32_t leaf, uint32_t subleaf, uint32_t regs[4]) noexcept;
// XCR0 (the register states the OS saves). Call only when CPUID.1:ECX.OSXSAVE is set; 0 off x86.
uint64_t xgetbv0() noexcept;

// ---- process facts (for the command line and benchmark reports) ------------------------

// "Linux 6.1.0-18-amd64 x86_64", "Windows 10.0.19045 x86_64"; "unknown" if not known.
std::string system_name();
// Peak resident memory of the process (max RSS / peak working set); 0 if not known.
uint64_t peak_resident_bytes() noexcept;
// Thread-safe gmtime.
bool utc_calendar(std::time_t t, std::tm &out) noexcept;

}  // namespace llmkv::os
