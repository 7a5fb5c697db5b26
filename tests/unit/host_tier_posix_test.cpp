// HostTier on Linux only: a real mlock failure under a tiny RLIMIT_MEMLOCK (fork, capabilities,
// rlimits), and mimalloc kept out of the process's global symbol scope (dlsym/dladdr). The
// portable tier tests are in host_tier_test.cpp.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "host_tier_skip.h"
#include "kv/host_tier.h"
#include "llmkv.h"

namespace llmkv {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;
constexpr size_t kSealedBlockBytes = 30 * 3 * 2 * 16 * 64;

// The real mlock path under a tiny RLIMIT_MEMLOCK, in a child so the limit (and the
// dropped capability) cannot leak into other tests.
TEST(HostTier, RealMlockFailureUnderTinyRlimitFallsBackToUnlocked) {
    SKIP_WITHOUT_MIMALLOC();
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "sanitizer runtimes replace mlock with a no-op that always succeeds";
#endif
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        // root ignores RLIMIT_MEMLOCK through CAP_IPC_LOCK: drop it from this child.
        __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
        __user_cap_data_struct caps[2]{};
        if (syscall(SYS_capget, &header, caps) != 0) _exit(77);
        caps[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
        caps[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
        if (syscall(SYS_capset, &header, caps) != 0) _exit(77);
        struct rlimit tiny {
            4096, 4096
        };
        if (setrlimit(RLIMIT_MEMLOCK, &tiny) != 0) _exit(77);
        llmkv_log_set(nullptr, nullptr, LLMKV_LOG_ERROR);  // keep the expected warning quiet
        try {
            HostTier tier(32 * kMiB);
            if (tier.locked()) _exit(2);
            void *block = tier.allocate_block(kSealedBlockBytes);
            if (block == nullptr) _exit(3);
            std::memset(block, 0x5a, kSealedBlockBytes);
            tier.free_block(block);
        } catch (...) {
            _exit(4);
        }
        _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        GTEST_SKIP() << "cannot drop CAP_IPC_LOCK / set RLIMIT_MEMLOCK here";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "2: locked anyway, 3: no block, 4: threw";
}

// mimalloc is loaded privately: the process malloc is not mimalloc's and mimalloc's symbols
// are not visible to anyone else, even while a tier is using it.
TEST(HostTier, MimallocStaysOutOfTheGlobalSymbolScope) {
    SKIP_WITHOUT_MIMALLOC();
    HostTier tier(32 * kMiB);
    void *block = tier.allocate_block(kSealedBlockBytes);
    ASSERT_NE(block, nullptr);
    EXPECT_EQ(dlsym(RTLD_DEFAULT, "mi_malloc"), nullptr);
    Dl_info info{};
    ASSERT_NE(dladdr(dlsym(RTLD_DEFAULT, "malloc"), &info), 0);
    ASSERT_NE(info.dli_fname, nullptr);
    EXPECT_EQ(std::string(info.dli_fname).find("mimalloc"), std::string::npos) << info.dli_fname;
    // Loaded all the same: the tier's instance is found by name without loading anything.
    EXPECT_NE(dlopen("libmimalloc.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD), nullptr);
    tier.free_block(block);
}

}  // namespace
}  // namespace llmkv
