// llmkv_loader.h from a C++ host (game engines): the table, the X-macro and the error path
// compile as C++ against the loader compiled as C.
//   loader_cxx_host LIB
#include <cstdio>
#include <cstring>
#include <string>

#include "llmkv_loader.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s LIB\n", argv[0]);
        return 2;
    }
    char err[512];
    llmkv_api api;
    if (llmkv_load("/nonexistent/libllmkv.so.0", &api, err, sizeof err) != LLMKV_LOAD_ERR_OPEN ||
        std::string(err).rfind("cannot open /nonexistent/libllmkv.so.0: ", 0) != 0) {
        std::fprintf(stderr, "FAIL: unexpected error for a missing file: %s\n", err);
        return 1;
    }
    if (llmkv_load(argv[1], &api, err, sizeof err) != LLMKV_LOAD_OK) {
        std::fprintf(stderr, "FAIL: %s\n", err);
        return 1;
    }
    int n = 0;
#define COUNT_(ret, fn, params) n += api.fn != nullptr;
    LLMKV_LOADER_FUNCTIONS(COUNT_)
#undef COUNT_
    const std::string version = api.version_string();
    std::printf("C++ host: llmkv %s, %d functions resolved\n", version.c_str(), n);
    const bool ok = api.version() == api.library_version &&
                    std::strcmp(api.status_string(LLMKV_OK), "LLMKV_OK") == 0;
    llmkv_unload(&api);
    std::printf(ok ? "ok\n" : "FAIL\n");
    return ok ? 0 : 1;
}
