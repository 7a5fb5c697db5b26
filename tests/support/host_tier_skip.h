// Tests that need the host tier skip, with the reason, where mimalloc is not installed (it is a
// Linux package dependency; a Windows build needs mimalloc.dll beside llmkv.dll).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "kv/host_tier.h"

#define SKIP_WITHOUT_MIMALLOC()                                                             \
    do {                                                                                    \
        std::string why_;                                                                   \
        if (!::llmkv::HostTier::available(&why_)) GTEST_SKIP() << "no host tier: " << why_; \
    } while (0)
