// FairMutex: a FIFO (ticket) lock. The engine's lock is taken in turn, so a thread that asks
// for it while the engine's worker thread steps gets it at the end of that step, before the
// worker's next one: a std::mutex lets the releasing thread take it straight back and starve
// the other for many steps.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace llmkv {

class FairMutex {
public:
    void lock() {
        std::unique_lock<std::mutex> l(m_);
        const uint64_t ticket = next_++;
        cv_.wait(l, [&] { return serving_ == ticket; });
    }
    bool try_lock() {
        std::lock_guard<std::mutex> l(m_);
        if (serving_ != next_) return false;
        ++next_;
        return true;
    }
    void unlock() {
        {
            std::lock_guard<std::mutex> l(m_);
            ++serving_;
        }
        cv_.notify_all();
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    uint64_t next_ = 0;     // the next ticket handed out
    uint64_t serving_ = 0;  // the ticket that holds (or may take) the lock
};

}  // namespace llmkv
