// BlockPool: the slab is anonymous memory (os::map_memory), so untouched blocks cost no
// resident memory.
#include "kv/block_pool.h"

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/fault.h"
#include "platform/os.h"

namespace llmkv {

BlockPool::BlockPool(uint32_t n_blocks, size_t block_bytes, const char *name)
    : name_(name), n_total_(n_blocks), block_bytes_(block_bytes) {
    if (n_blocks == 0 || block_bytes == 0) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "%s pool: %u blocks of %zu bytes is empty", name, n_blocks,
             block_bytes);
    }
    if (__builtin_mul_overflow(size_t(n_blocks), block_bytes, &slab_bytes_)) {
        fail(LLMKV_ERR_OUT_OF_MEMORY, "%s pool: %u blocks of %zu bytes overflows", name, n_blocks,
             block_bytes);
    }
    // The bookkeeping first: a throw after the mapping would leak it (no destructor runs).
    free_list_.reserve(n_blocks);
    refcount_.assign(n_blocks, 0);
    void *p = fault::should_fail(fault::Site::kKvPool) ? (errno = ENOMEM, nullptr)
                                                       : os::map_memory(slab_bytes_);
    if (p == nullptr) {
        fail(LLMKV_ERR_OUT_OF_MEMORY, "%s pool: cannot map %zu bytes: %s", name, slab_bytes_,
             std::strerror(errno));
    }
    slab_ = static_cast<uint8_t *>(p);
    for (uint32_t i = n_blocks; i-- > 0;) free_list_.push_back(i);
}

BlockPool::~BlockPool() {
    if (slab_) os::release_memory(slab_, slab_bytes_);
}

bool BlockPool::allocate_many(uint32_t n, std::vector<uint32_t> &out) {
    if (n > free_list_.size()) return false;
    out.reserve(out.size() + n);  // may throw: nothing taken yet; the pushes below cannot
    for (uint32_t i = 0; i < n; ++i) {
        uint32_t id = free_list_.back();
        free_list_.pop_back();
        refcount_[id] = 1;
        out.push_back(id);
    }
    return true;
}

bool BlockPool::allocate(uint32_t &id) {
    if (free_list_.empty()) return false;
    id = free_list_.back();
    free_list_.pop_back();
    refcount_[id] = 1;
    return true;
}

void BlockPool::retain(uint32_t id) {
    if (id >= n_total_ || refcount_[id] == 0) {
        fail(LLMKV_ERR_INTERNAL, "%s pool: retain of free or invalid block %u", name_, id);
    }
    ++refcount_[id];
}

void BlockPool::release(uint32_t id) {
    if (id >= n_total_ || refcount_[id] == 0) {
        fail(LLMKV_ERR_INTERNAL, "%s pool: release of free or invalid block %u", name_, id);
    }
    if (--refcount_[id] == 0) free_list_.push_back(id);
}

void BlockPool::check_invariants() const {
    std::vector<uint8_t> on_free(n_total_, 0);
    for (uint32_t id : free_list_) {
        if (id >= n_total_)
            fail(LLMKV_ERR_INTERNAL, "%s pool: free list holds bad id %u", name_, id);
        if (on_free[id])
            fail(LLMKV_ERR_INTERNAL, "%s pool: block %u twice on the free list", name_, id);
        on_free[id] = 1;
    }
    for (uint32_t id = 0; id < n_total_; ++id) {
        if (on_free[id] && refcount_[id] != 0) {
            fail(LLMKV_ERR_INTERNAL, "%s pool: free block %u has refcount %u", name_, id,
                 refcount_[id]);
        }
        if (!on_free[id] && refcount_[id] == 0) {
            fail(LLMKV_ERR_INTERNAL, "%s pool: block %u is neither free nor referenced", name_, id);
        }
    }
}

}  // namespace llmkv
