// CopyEngine: the CPU copy thread (a FIFO of submissions, one memcpy per op) and PinSet.
#include "kv/copy_engine.h"

#include <chrono>
#include <cstring>
#include <system_error>

#include "common/error.h"
#include "common/fault.h"
#include "common/thread_priority.h"

namespace llmkv {

namespace {

bool ranges_overlap(const void *a, const void *b, size_t n) {
    const uintptr_t x = reinterpret_cast<uintptr_t>(a);
    const uintptr_t y = reinterpret_cast<uintptr_t>(b);
    return x < y ? y - x < n : x - y < n;
}

}  // namespace

CopyEngine::CopyEngine() {
    try {
        fault::maybe_fail_thread_start();
        thread_ = std::thread([this, priority = spawn_priority()] {
            apply_thread_priority(priority);
            copy_thread_main();
        });
    } catch (const std::system_error &e) {
        fail(LLMKV_ERR_OUT_OF_MEMORY, "copy engine: cannot start its copy thread: %s", e.what());
    }
}

CopyEngine::~CopyEngine() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    work_cv_.notify_all();
    // The copy thread drains the queue before it exits.
    thread_.join();
}

Ticket CopyEngine::submit(std::vector<CopyOp> ops) {
    for (size_t i = 0; i < ops.size(); ++i) {
        const CopyOp &op = ops[i];
        if (op.bytes == 0) continue;
        if (op.src == nullptr || op.dst == nullptr) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "copy op %zu of %zu: null %s pointer for %zu bytes", i,
                 ops.size(), op.src == nullptr ? "source" : "destination", op.bytes);
        }
        if (ranges_overlap(op.src, op.dst, op.bytes)) {
            fail(LLMKV_ERR_INVALID_ARGUMENT,
                 "copy op %zu of %zu: source %p and destination %p overlap (%zu bytes)", i,
                 ops.size(), op.src, static_cast<void *>(op.dst), op.bytes);
        }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) fail(LLMKV_ERR_STATE, "copy engine: submit during shutdown");
    const Ticket t = last_issued_ + 1;
    queue_.push_back(Job{t, std::move(ops)});  // may throw: then nothing was issued
    last_issued_ = t;
    work_cv_.notify_one();
    return t;
}

bool CopyEngine::done(Ticket t) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return t <= completed_;
}

void CopyEngine::wait(Ticket t) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (t > last_issued_) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "copy engine: ticket %llu was never issued (last is %llu)",
             (unsigned long long)t, (unsigned long long)last_issued_);
    }
    done_cv_.wait(lock, [this, t] { return t <= completed_; });
}

void CopyEngine::wait_all() {
    std::unique_lock<std::mutex> lock(mutex_);
    const Ticket last = last_issued_;
    done_cv_.wait(lock, [this, last] { return last <= completed_; });
}

CopyStats CopyEngine::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

void CopyEngine::copy_thread_main() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        work_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) break;  // stop_ and drained
        Job job = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();

        const auto start = std::chrono::steady_clock::now();
        uint64_t bytes = 0;
        for (const CopyOp &op : job.ops) {
            if (op.bytes != 0) std::memcpy(op.dst, op.src, op.bytes);
            bytes += op.bytes;
        }
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::steady_clock::now() - start);

        lock.lock();
        completed_ = job.ticket;
        stats_.tickets += 1;
        stats_.ops += job.ops.size();
        stats_.bytes_copied += bytes;
        stats_.copy_ns += uint64_t(ns.count());
        done_cv_.notify_all();
    }
}

void PinSet::pin(Ticket t, const std::vector<uint64_t> &keys) {
    if (keys.empty()) return;
    std::vector<uint64_t> copy(keys);  // may throw: nothing changed yet
    size_t counted = 0;
    try {
        for (uint64_t key : copy) {
            ++counts_[key];
            ++counted;
        }
        pending_.emplace_back(t, std::move(copy));
    } catch (...) {
        // Undo the counts taken so far: a failed pin changes nothing.
        for (size_t i = 0; i < counted; ++i) {
            auto it = counts_.find(keys[i]);
            if (--it->second == 0) counts_.erase(it);
        }
        throw;
    }
}

size_t PinSet::release_done(const CopyQueue &queue) {
    size_t unpinned = 0;
    // Tickets of one CopyEngine finish in order, but a queue with several streams may
    // finish them out of order, so every pending entry is checked.
    for (auto entry = pending_.begin(); entry != pending_.end();) {
        if (!queue.done(entry->first)) {
            ++entry;
            continue;
        }
        for (uint64_t key : entry->second) {
            auto it = counts_.find(key);
            if (--it->second == 0) {
                counts_.erase(it);
                ++unpinned;
            }
        }
        entry = pending_.erase(entry);
    }
    return unpinned;
}

}  // namespace llmkv
