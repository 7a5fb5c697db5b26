/* Prints the loader's function list (LLMKV_LOADER_FUNCTIONS) as "func<TAB>llmkv_NAME" lines,
 * the format of bindings/abi/gen_layout.py's layout program; check_function_list.py compares
 * the two. */
#include <stdio.h>

#include "llmkv_loader.h"

#define PRINT_(ret, fn, params) printf("func\tllmkv_%s\n", #fn);

int main(void) {
    LLMKV_LOADER_FUNCTIONS(PRINT_)
    return 0;
}
