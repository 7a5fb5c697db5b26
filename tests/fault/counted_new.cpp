// The test executable's global operator new / delete: malloc and free, with every
// allocation a fault-injection site (common/fault.h: Site::kOperatorNew). The throwing forms
// throw std::bad_alloc when the site is told to fail; the nothrow forms return nullptr.
#include <cstdlib>
#include <new>

#include "common/fault.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace fault = llmkv::fault;
using fault::Site;

namespace {
// LLMKV_FAULT_BACKTRACE=1 (sanitizer builds): print where each injected failure happens.
bool injected() {
    if (!fault::should_fail(Site::kOperatorNew)) return false;
#if defined(__SANITIZE_ADDRESS__)
    static const bool trace = std::getenv("LLMKV_FAULT_BACKTRACE") != nullptr;
    if (trace) __sanitizer_print_stack_trace();
#endif
    return true;
}
void *counted_alloc(size_t n) {
    if (injected()) return nullptr;
    return std::malloc(n ? n : 1);
}
}  // namespace

// Injected failures of the nothrow forms: callers that ask for nothrow memory are entitled
// to carry on without it (std::stable_sort falls back to an in-place sort), so a call that
// then succeeds is clean. Only touched on the arming thread.
uint64_t g_nothrow_injected = 0;

namespace {
void *counted_alloc_nothrow(size_t n) {
    void *p = counted_alloc(n);
    if (!p) ++g_nothrow_injected;
    return p;
}
void *counted_alloc_aligned(size_t n, std::align_val_t al) {
    if (injected()) return nullptr;
    size_t a = size_t(al) < sizeof(void *) ? sizeof(void *) : size_t(al);
    void *p = nullptr;
    if (posix_memalign(&p, a, n ? n : 1) != 0) return nullptr;
    return p;
}
}  // namespace

void *operator new(size_t n) {
    if (void *p = counted_alloc(n)) return p;
    throw std::bad_alloc();
}
void *operator new[](size_t n) {
    if (void *p = counted_alloc(n)) return p;
    throw std::bad_alloc();
}
void *operator new(size_t n, const std::nothrow_t &) noexcept {
    return counted_alloc_nothrow(n);
}
void *operator new[](size_t n, const std::nothrow_t &) noexcept {
    return counted_alloc_nothrow(n);
}
void *operator new(size_t n, std::align_val_t al) {
    if (void *p = counted_alloc_aligned(n, al)) return p;
    throw std::bad_alloc();
}
void *operator new[](size_t n, std::align_val_t al) {
    if (void *p = counted_alloc_aligned(n, al)) return p;
    throw std::bad_alloc();
}
void *operator new(size_t n, std::align_val_t al, const std::nothrow_t &) noexcept {
    return counted_alloc_aligned(n, al);
}
void *operator new[](size_t n, std::align_val_t al, const std::nothrow_t &) noexcept {
    return counted_alloc_aligned(n, al);
}
void operator delete(void *p) noexcept {
    std::free(p);
}
void operator delete[](void *p) noexcept {
    std::free(p);
}
void operator delete(void *p, size_t) noexcept {
    std::free(p);
}
void operator delete[](void *p, size_t) noexcept {
    std::free(p);
}
void operator delete(void *p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void *p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void *p, size_t, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void *p, size_t, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void *p, const std::nothrow_t &) noexcept {
    std::free(p);
}
void operator delete[](void *p, const std::nothrow_t &) noexcept {
    std::free(p);
}
