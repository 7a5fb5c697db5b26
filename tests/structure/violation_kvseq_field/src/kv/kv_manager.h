// Fixture: a KvSeq with data members (the KV manager's state) and the questions others ask.
#pragma once

#include <cstdint>
#include <vector>

struct HostKv {
    int phase = 0;
};

struct KvSeq {
    std::vector<int> kv;  // named outside kv/: a violation
    HostKv host;
    uint32_t n_offloaded = 0;

    uint32_t n_tokens() const { return uint32_t(kv.size()); }
    bool parked() const { return host.phase == 2; }
    uint32_t offloaded_blocks() const { return n_offloaded; }
};
