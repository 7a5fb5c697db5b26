// The platform layer on POSIX systems (Linux first; the calls are POSIX apart from the
// madvise flags and the thread id, which are guarded below).
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "platform/format.h"
#include "platform/os.h"
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace llmkv::os {

MapError map_file(const std::string &path, FileMap &out, bool fail_map) {
    out = FileMap{};
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return MapError::kOpen;
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        errno = e;
        return MapError::kStat;
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return MapError::kNotRegular;
    }
    const size_t size = size_t(st.st_size);
    if (size > 0) {
        void *m = fail_map ? (errno = ENOMEM, MAP_FAILED)
                           : ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            const int e = errno;
            ::close(fd);
            errno = e;
            return MapError::kMap;
        }
        out.data = static_cast<const uint8_t *>(m);
        out.size = size;
    }
    ::close(fd);  // the mapping keeps the file
    return MapError::kNone;
}

void unmap_file(FileMap &m) noexcept {
    if (m.data != nullptr) ::munmap(const_cast<uint8_t *>(m.data), m.size);
    m = FileMap{};
}

void drop_file_pages(const void *p, size_t n) noexcept {
    // A private read-only file mapping: the pages were never written, so dropping them loses
    // nothing. Advice only.
    (void)::madvise(const_cast<void *>(p), n, MADV_DONTNEED);
}

size_t page_size() noexcept {
    static const size_t page = size_t(::sysconf(_SC_PAGESIZE));
    return page;
}

void *map_memory(size_t bytes) {
    void *p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
}

void *map_memory_aligned(size_t bytes, size_t alignment) {
    // Over-map by the alignment and trim both ends: mmap only promises page alignment.
    size_t mapped = 0;
    if (bytes == 0 || alignment == 0 || (alignment & (alignment - 1)) != 0 ||
        __builtin_add_overflow(bytes, alignment, &mapped)) {
        errno = EINVAL;
        return nullptr;
    }
    void *raw = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const uintptr_t base = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t start = (base + alignment - 1) & ~uintptr_t(alignment - 1);
    const uintptr_t end = start + bytes;
    if (start > base) ::munmap(raw, start - base);
    if (base + mapped > end) ::munmap(reinterpret_cast<void *>(end), base + mapped - end);
    return reinterpret_cast<void *>(start);
}

void release_memory(void *p, size_t bytes) noexcept {
    if (p != nullptr) ::munmap(p, bytes);  // also drops a lock
}

bool decommit_memory(void *p, size_t bytes) noexcept {
    // MAP_FIXED replaces the mapping in one step (no window in which another mmap could take
    // the range); the PROT_NONE / MAP_NORESERVE placeholder holds no memory.
    if (::mmap(p, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1,
               0) == MAP_FAILED) {
        ::munmap(p, bytes);  // cannot happen short of a kernel failure; never leak memory
        return false;
    }
    return true;
}

bool recommit_memory(void *p, size_t bytes) noexcept {
    return ::mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                  0) != MAP_FAILED;
}

void exclude_from_children(void *p, size_t bytes) noexcept {
#if defined(MADV_DONTFORK)
    // A process that forks (a host spawning a helper) would otherwise share the memory
    // copy-on-write and pay a page copy on our next write to every touched page.
    (void)::madvise(p, bytes, MADV_DONTFORK);
#else
    (void)p;
    (void)bytes;
#endif
}

int lock_memory(const void *p, size_t bytes) noexcept {
    return ::mlock(p, bytes);
}

std::string lock_limit_text() {
    struct rlimit lim {};
    if (::getrlimit(RLIMIT_MEMLOCK, &lim) != 0) return "unknown";
    return lim.rlim_cur == RLIM_INFINITY
               ? std::string("RLIMIT_MEMLOCK soft limit unlimited")
               : format("RLIMIT_MEMLOCK soft limit %llu bytes", (unsigned long long)lim.rlim_cur);
}

const char *lock_function_name() noexcept {
    return "mlock";
}

const char *lock_advice() noexcept {
    return "Raise `ulimit -l` or grant CAP_IPC_LOCK to lock it";
}

std::string shared_library_file(const std::string &stem) {
#if defined(__APPLE__)
    return "lib" + stem + ".dylib";
#else
    return "lib" + stem + ".so";
#endif
}

const char *mimalloc_library_file() noexcept {
    return "libmimalloc.so.2";
}

void *load_library(const std::string &path, std::string &error) {
    dlerror();
    void *h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
        const char *e = dlerror();  // names the file
        error = e ? std::string(e) : path + ": dlopen failed";
    }
    return h;
}

void *library_symbol(void *library, const char *name) noexcept {
    return ::dlsym(library, name);
}

void unload_library(void *library) noexcept {
    if (library != nullptr) ::dlclose(library);
}

std::string directory_of_binary_containing(const void *address) {
    Dl_info info{};
    if (::dladdr(address, &info) == 0 || !info.dli_fname) return {};
    const std::string file = info.dli_fname;
    const size_t slash = file.rfind('/');
    return slash == std::string::npos ? std::string(".") : file.substr(0, slash);
}

int create_exclusive(const std::string &path) {
    return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
}

int64_t write_some(int fd, const void *p, size_t n) {
    return int64_t(::write(fd, p, n));
}

int sync_file(int fd) {
    return ::fsync(fd);
}

int close_file(int fd) {
    return ::close(fd);
}

int replace_file(const std::string &from, const std::string &to) {
    return ::rename(from.c_str(), to.c_str());
}

int remove_file(const std::string &path) {
    return ::unlink(path.c_str());
}

void sync_parent_directory(const std::string &path) noexcept {
    const size_t slash = path.rfind('/');
    const std::string dir =
        slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)::fsync(dfd);
        ::close(dfd);
    }
}

long process_id() noexcept {
    return long(::getpid());
}

void wait_while_equal(const std::atomic<uint32_t> &word, uint32_t expected) noexcept {
    word.wait(expected, std::memory_order_acquire);
}
void wake_one(std::atomic<uint32_t> &word) noexcept {
    word.notify_one();
}
void wake_all(std::atomic<uint32_t> &word) noexcept {
    word.notify_all();
}

bool lower_thread_priority(int levels, std::string &error) {
#if defined(__linux__)
    // Linux gives each thread its own nice value (PRIO_PROCESS with a thread id).
    const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
    errno = 0;
    const int current = ::getpriority(PRIO_PROCESS, tid);
    if (current == -1 && errno != 0) {
        error = format("getpriority failed: %s", std::strerror(errno));
        return false;
    }
    const int target = current + levels > 19 ? 19 : current + levels;
    if (::setpriority(PRIO_PROCESS, tid, target) != 0) {
        error = format("setpriority(%d) failed: %s", target, std::strerror(errno));
        return false;
    }
    return true;
#else
    (void)levels;
    error = "per-thread priorities are not implemented on this system";
    return false;
#endif
}

std::string system_name() {
    struct utsname u {};
    if (::uname(&u) != 0) return "unknown";
    return std::string(u.sysname) + " " + u.release + " " + u.machine;
}

uint64_t peak_resident_bytes() noexcept {
    struct rusage ru {};
    if (::getrusage(RUSAGE_SELF, &ru) != 0) return 0;
#if defined(__APPLE__)
    return uint64_t(ru.ru_maxrss);  // bytes there
#else
    return uint64_t(ru.ru_maxrss) * 1024;  // KiB on Linux
#endif
}

bool utc_calendar(std::time_t t, std::tm &out) noexcept {
    return ::gmtime_r(&t, &out) != nullptr;
}

}  // namespace llmkv::os
