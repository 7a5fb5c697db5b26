// The platform layer on Windows (built with MinGW-w64 here; written to compile with MSVC too:
// the compiler-specific lines are the CPUID ones, guarded by _MSC_VER).
#include "platform/format.h"
#include "platform/os.h"

#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX
#endif
// <windows.h> before the headers that need its types.
// clang-format off
#include <windows.h>
#include <psapi.h>
// clang-format on

#include <fcntl.h>
#include <io.h>
#include <process.h>
#include <sys/stat.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

namespace llmkv::os {

namespace {

// UTF-8 to UTF-16 for the wide APIs; an invalid sequence gives an empty string (the call
// that uses it then fails with ENOENT).
std::wstring wide(const std::string &s) {
    if (s.empty()) return {};
    const int n =
        MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s.data(), int(s.size()), nullptr, 0);
    if (n <= 0) return {};
    std::wstring w(size_t(n), L'\0');
    MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, s.data(), int(s.size()), w.data(), n);
    return w;
}

std::string narrow(const wchar_t *w) {
    const int n = WideCharToMultiByte(CP_UTF8, 0, w, -1, nullptr, 0, nullptr, nullptr);
    if (n <= 1) return {};
    std::string s(size_t(n - 1), '\0');
    WideCharToMultiByte(CP_UTF8, 0, w, -1, s.data(), n, nullptr, nullptr);
    return s;
}

// The nearest errno value of a Windows error, so callers report with std::strerror.
int errno_of(DWORD e) {
    switch (e) {
        case ERROR_FILE_NOT_FOUND:
        case ERROR_PATH_NOT_FOUND:
        case ERROR_INVALID_NAME:
        case ERROR_BAD_NETPATH:
            return ENOENT;
        case ERROR_ACCESS_DENIED:
        case ERROR_SHARING_VIOLATION:
        case ERROR_LOCK_VIOLATION:
            return EACCES;
        case ERROR_FILE_EXISTS:
        case ERROR_ALREADY_EXISTS:
            return EEXIST;
        case ERROR_NOT_ENOUGH_MEMORY:
        case ERROR_OUTOFMEMORY:
        case ERROR_COMMITMENT_LIMIT:
        case ERROR_WORKING_SET_QUOTA:
            return ENOMEM;
        case ERROR_DISK_FULL:
        case ERROR_HANDLE_DISK_FULL:
            return ENOSPC;
        case ERROR_INVALID_PARAMETER:
            return EINVAL;
        default:
            return EIO;
    }
}
void set_errno_from_last_error() {
    errno = errno_of(GetLastError());
}

std::string system_message(DWORD e) {
    wchar_t *buf = nullptr;
    const DWORD n = FormatMessageW(
        FORMAT_MESSAGE_ALLOCATE_BUFFER | FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS,
        nullptr, e, 0, reinterpret_cast<wchar_t *>(&buf), 0, nullptr);
    std::string s = n && buf ? narrow(buf) : std::string();
    if (buf) LocalFree(buf);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    return s.empty() ? format("Windows error %lu", (unsigned long)e)
                     : format("%s (Windows error %lu)", s.c_str(), (unsigned long)e);
}

}  // namespace

MapError map_file(const std::string &path, FileMap &out, bool fail_map) {
    out = FileMap{};
    const std::wstring w = wide(path);
    if (!w.empty()) {
        const DWORD attrs = GetFileAttributesW(w.c_str());
        if (attrs != INVALID_FILE_ATTRIBUTES && (attrs & FILE_ATTRIBUTE_DIRECTORY))
            return MapError::kNotRegular;  // CreateFileW would say "access denied"
    }
    HANDLE file = w.empty()
                      ? INVALID_HANDLE_VALUE
                      : CreateFileW(w.c_str(), GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_DELETE,
                                    nullptr, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, nullptr);
    if (file == INVALID_HANDLE_VALUE) {
        if (w.empty())
            errno = ENOENT;
        else
            set_errno_from_last_error();
        return MapError::kOpen;
    }
    if (GetFileType(file) != FILE_TYPE_DISK) {
        CloseHandle(file);
        return MapError::kNotRegular;
    }
    LARGE_INTEGER size{};
    if (!GetFileSizeEx(file, &size)) {
        set_errno_from_last_error();
        CloseHandle(file);
        return MapError::kStat;
    }
    if (uint64_t(size.QuadPart) > uint64_t(SIZE_MAX)) {
        CloseHandle(file);
        errno = EFBIG;
        return MapError::kMap;
    }
    if (size.QuadPart > 0) {
        HANDLE mapping =
            fail_map ? nullptr : CreateFileMappingW(file, nullptr, PAGE_READONLY, 0, 0, nullptr);
        void *view = mapping ? MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, 0) : nullptr;
        if (view == nullptr) {
            if (fail_map)
                errno = ENOMEM;
            else
                set_errno_from_last_error();
            if (mapping) CloseHandle(mapping);
            CloseHandle(file);
            return MapError::kMap;
        }
        out.data = static_cast<const uint8_t *>(view);
        out.size = size_t(size.QuadPart);
        out.handle = mapping;
    }
    CloseHandle(file);  // the mapping object keeps the file
    return MapError::kNone;
}

void unmap_file(FileMap &m) noexcept {
    if (m.data != nullptr) UnmapViewOfFile(m.data);
    if (m.handle != nullptr) CloseHandle(static_cast<HANDLE>(m.handle));
    m = FileMap{};
}

void drop_file_pages(const void *p, size_t n) noexcept {
    // Unlocking pages that are not locked removes them from the working set (the documented
    // way to trim a range); the call "fails" with ERROR_NOT_LOCKED, which is expected.
    (void)VirtualUnlock(const_cast<void *>(p), n);
}

size_t page_size() noexcept {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return size_t(si.dwPageSize);
}

void *map_memory(size_t bytes) {
    // Committed pages are zero-filled on first touch and cost no RAM before; they count
    // against the commit limit (the pagefile-backed total), which is the OS's choice here.
    void *p = VirtualAlloc(nullptr, bytes, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
    if (p == nullptr) set_errno_from_last_error();
    return p;
}

void *map_memory_aligned(size_t bytes, size_t alignment) {
    if (bytes == 0 || alignment == 0 || (alignment & (alignment - 1)) != 0 ||
        bytes > SIZE_MAX - alignment) {
        errno = EINVAL;
        return nullptr;
    }
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    if (alignment <= si.dwAllocationGranularity) return map_memory(bytes);
    // More than the commit limit can never be committed: say so before reserving (a
    // reservation of that size can succeed, and each failed commit of it is slow).
    MEMORYSTATUSEX ms;
    ms.dwLength = sizeof(ms);
    if (GlobalMemoryStatusEx(&ms) && bytes > ms.ullTotalPageFile) {
        errno = ENOMEM;
        return nullptr;
    }
    // A reservation cannot be trimmed: find an aligned address inside a larger reservation,
    // release it and reserve exactly there. Another thread can take the range in between
    // (ERROR_INVALID_ADDRESS); then try again. Any other failure is final.
    for (int attempt = 0; attempt < 16; ++attempt) {
        void *probe = VirtualAlloc(nullptr, bytes + alignment, MEM_RESERVE, PAGE_NOACCESS);
        if (probe == nullptr) {
            set_errno_from_last_error();
            return nullptr;
        }
        const uintptr_t start =
            (reinterpret_cast<uintptr_t>(probe) + alignment - 1) & ~uintptr_t(alignment - 1);
        VirtualFree(probe, 0, MEM_RELEASE);
        void *p = VirtualAlloc(reinterpret_cast<void *>(start), bytes, MEM_RESERVE | MEM_COMMIT,
                               PAGE_READWRITE);
        if (p != nullptr) return p;
        if (GetLastError() != ERROR_INVALID_ADDRESS) {
            set_errno_from_last_error();
            return nullptr;
        }
    }
    errno = ENOMEM;
    return nullptr;
}

void release_memory(void *p, size_t) noexcept {
    if (p != nullptr) VirtualFree(p, 0, MEM_RELEASE);  // also drops a lock
}

bool decommit_memory(void *p, size_t bytes) noexcept {
    return VirtualFree(p, bytes, MEM_DECOMMIT) != 0;  // the range stays reserved
}

bool recommit_memory(void *p, size_t bytes) noexcept {
    return VirtualAlloc(p, bytes, MEM_COMMIT, PAGE_READWRITE) != nullptr;
}

void exclude_from_children(void *, size_t) noexcept {}  // Windows processes do not fork

int lock_memory(const void *p, size_t bytes) noexcept {
    // VirtualLock is bounded by the minimum working set: grow it by the region first.
    SIZE_T lo = 0, hi = 0;
    HANDLE self = GetCurrentProcess();
    if (GetProcessWorkingSetSize(self, &lo, &hi)) {
        const SIZE_T add = SIZE_T(bytes) + (SIZE_T(1) << 20);
        (void)SetProcessWorkingSetSize(self, lo + add, hi > lo + add ? hi : lo + add + add);
    }
    if (VirtualLock(const_cast<void *>(p), bytes)) return 0;
    set_errno_from_last_error();
    return -1;
}

std::string lock_limit_text() {
    SIZE_T lo = 0, hi = 0;
    if (!GetProcessWorkingSetSize(GetCurrentProcess(), &lo, &hi)) return "working set unknown";
    return format("minimum working set %llu bytes", (unsigned long long)lo);
}

const char *lock_function_name() noexcept {
    return "VirtualLock";
}

const char *lock_advice() noexcept {
    return "Run with a larger working-set quota (SetProcessWorkingSetSize) to lock it";
}

std::string shared_library_file(const std::string &stem) {
    return stem + ".dll";
}

const char *mimalloc_library_file() noexcept {
    return "mimalloc.dll";
}

void *load_library(const std::string &path, std::string &error) {
    // LoadLibrary takes only backslashes as separators (a path with '/' is not found).
    std::wstring w = wide(path);
    for (wchar_t &c : w)
        if (c == L'/') c = L'\\';
    HMODULE h = w.empty() ? nullptr : LoadLibraryW(w.c_str());
    if (h == nullptr)
        error = path + ": " + system_message(w.empty() ? ERROR_INVALID_NAME : GetLastError());
    return reinterpret_cast<void *>(h);
}

void *library_symbol(void *library, const char *name) noexcept {
    return reinterpret_cast<void *>(GetProcAddress(static_cast<HMODULE>(library), name));
}

void unload_library(void *library) noexcept {
    if (library != nullptr) FreeLibrary(static_cast<HMODULE>(library));
}

std::string directory_of_binary_containing(const void *address) {
    HMODULE m = nullptr;
    if (!GetModuleHandleExW(
            GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
            static_cast<LPCWSTR>(address), &m))
        return {};
    std::wstring buf(32768, L'\0');
    const DWORD n = GetModuleFileNameW(m, buf.data(), DWORD(buf.size()));
    if (n == 0 || n >= buf.size()) return {};
    buf.resize(n);
    const size_t slash = buf.find_last_of(L"\\/");
    return slash == std::wstring::npos ? std::string(".") : narrow(buf.substr(0, slash).c_str());
}

int create_exclusive(const std::string &path) {
    const std::wstring w = wide(path);
    if (w.empty()) {
        errno = ENOENT;
        return -1;
    }
    return _wopen(w.c_str(), _O_WRONLY | _O_CREAT | _O_EXCL | _O_BINARY | _O_NOINHERIT,
                  _S_IREAD | _S_IWRITE);
}

int64_t write_some(int fd, const void *p, size_t n) {
    const unsigned chunk = n > (1u << 30) ? (1u << 30) : unsigned(n);  // _write takes unsigned
    return int64_t(_write(fd, p, chunk));
}

int sync_file(int fd) {
    return _commit(fd);
}

int close_file(int fd) {
    return _close(fd);
}

int replace_file(const std::string &from, const std::string &to) {
    const std::wstring wf = wide(from), wt = wide(to);
    if (wf.empty() || wt.empty()) {
        errno = ENOENT;
        return -1;
    }
    if (MoveFileExW(wf.c_str(), wt.c_str(), MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH))
        return 0;
    set_errno_from_last_error();
    return -1;
}

int remove_file(const std::string &path) {
    const std::wstring w = wide(path);
    if (w.empty()) {
        errno = ENOENT;
        return -1;
    }
    return _wunlink(w.c_str());
}

void sync_parent_directory(const std::string &) noexcept {}  // MOVEFILE_WRITE_THROUGH did it

long process_id() noexcept {
    return long(GetCurrentProcessId());
}

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "WaitOnAddress needs the atomic to be the plain 32-bit word");

void wait_while_equal(const std::atomic<uint32_t> &word, uint32_t expected) noexcept {
    // Compares the word with `expected` itself and sleeps only while they are equal.
    WaitOnAddress(const_cast<std::atomic<uint32_t> *>(&word), &expected, sizeof expected, INFINITE);
}
void wake_one(std::atomic<uint32_t> &word) noexcept {
    WakeByAddressSingle(&word);
}
void wake_all(std::atomic<uint32_t> &word) noexcept {
    WakeByAddressAll(&word);
}

bool lower_thread_priority(int levels, std::string &error) {
    // Windows has a few thread priorities around NORMAL instead of 40 nice values: 1-9 nice
    // steps are BELOW_NORMAL, 10-18 LOWEST, 19 IDLE.
    const int target = levels >= 19   ? THREAD_PRIORITY_IDLE
                       : levels >= 10 ? THREAD_PRIORITY_LOWEST
                                      : THREAD_PRIORITY_BELOW_NORMAL;
    HANDLE self = GetCurrentThread();
    const int current = GetThreadPriority(self);
    if (current == THREAD_PRIORITY_ERROR_RETURN) {
        error = "GetThreadPriority failed: " + system_message(GetLastError());
        return false;
    }
    if (current <= target) return true;  // already at or below it
    if (!SetThreadPriority(self, target)) {
        error = "SetThreadPriority failed: " + system_message(GetLastError());
        return false;
    }
    return true;
}

std::string system_name() {
    // GetVersionEx reports the version the executable's manifest declares; ntdll's
    // RtlGetVersion reports the real one.
    using RtlGetVersionFn = LONG(WINAPI *)(OSVERSIONINFOW *);
    OSVERSIONINFOW v{};
    v.dwOSVersionInfoSize = sizeof v;
    HMODULE ntdll = GetModuleHandleW(L"ntdll.dll");
    auto get = ntdll ? reinterpret_cast<RtlGetVersionFn>(
                           reinterpret_cast<void *>(GetProcAddress(ntdll, "RtlGetVersion")))
                     : nullptr;
    SYSTEM_INFO si;
    GetNativeSystemInfo(&si);
    const char *arch = si.wProcessorArchitecture == PROCESSOR_ARCHITECTURE_AMD64   ? "x86_64"
                       : si.wProcessorArchitecture == PROCESSOR_ARCHITECTURE_ARM64 ? "arm64"
                                                                                   : "unknown";
    if (!get || get(&v) != 0) return format("Windows %s", arch);
    return format("Windows %lu.%lu.%lu %s", (unsigned long)v.dwMajorVersion,
                  (unsigned long)v.dwMinorVersion, (unsigned long)v.dwBuildNumber, arch);
}

uint64_t peak_resident_bytes() noexcept {
    PROCESS_MEMORY_COUNTERS c{};
    if (!GetProcessMemoryInfo(GetCurrentProcess(), &c, sizeof c)) return 0;
    return uint64_t(c.PeakWorkingSetSize);
}

bool utc_calendar(std::time_t t, std::tm &out) noexcept {
    return gmtime_s(&out, &t) == 0;
}

}  // namespace llmkv::os
