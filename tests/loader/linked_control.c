/* A host linked against libllmkv the ordinary way: check_no_link.sh must reject it (the
 * test loader.no_link_dependency_catches_linked shows the check can fail). */
#include <stdio.h>

#include "llmkv.h"

int main(void) {
    printf("%s\n", llmkv_version_string());
    return 0;
}
