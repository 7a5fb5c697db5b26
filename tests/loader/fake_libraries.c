/*
 * Fake libllmkv builds for the loader's error cases, one shared library per FAKE_* value
 * (tests/loader/CMakeLists.txt). They include llmkv.h so each definition has the header's
 * declaration (and its default visibility).
 *   FAKE_OLD        llmkv_version() = 0.3.0: "too old"
 *   FAKE_MAJOR      llmkv_version() = 1.0.0: "incompatible"
 *   FAKE_PARTIAL    this header's version, but only the first four functions of the list:
 *                   "missing symbol llmkv_log_set"
 *   FAKE_NOVERSION  a library without llmkv_version: "not an llmkv library"
 */
#include "llmkv.h"

#if defined(FAKE_OLD)
int llmkv_version(void) {
    return 300;
}
const char *llmkv_version_string(void) {
    return "0.3.0";
}
#elif defined(FAKE_MAJOR)
int llmkv_version(void) {
    return 10000;
}
const char *llmkv_version_string(void) {
    return "1.0.0";
}
#elif defined(FAKE_PARTIAL)
int llmkv_version(void) {
    return LLMKV_VERSION_NUMBER;
}
const char *llmkv_version_string(void) {
    return "fake";
}
const char *llmkv_status_string(llmkv_status status) {
    return status ? "LLMKV_ERR_UNKNOWN" : "LLMKV_OK";
}
const char *llmkv_last_error(void) {
    return "";
}
#elif defined(FAKE_NOVERSION)
const char *llmkv_last_error(void) {
    return "";
}
#else
#error "define one of FAKE_OLD, FAKE_MAJOR, FAKE_PARTIAL, FAKE_NOVERSION"
#endif
