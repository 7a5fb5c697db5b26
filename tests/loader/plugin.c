/* A plugin (a shared library of a host) that compiles the loader in: check_no_link.sh
 * --plugin checks that it neither needs libllmkv nor exports llmkv_load / llmkv_unload, which
 * another plugin's copy of the loader could otherwise bind to. */
#include "llmkv_loader.h"

__attribute__((visibility("default"))) int plugin_llmkv_version(const char *library) {
    llmkv_api api;
    int v = -1;
    if (llmkv_load(library, &api, NULL, 0) == LLMKV_LOAD_OK) {
        v = api.version();
        llmkv_unload(&api);
    }
    return v;
}
