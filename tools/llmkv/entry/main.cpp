// main() of the llmkv command.
#include "cli_common.h"

int main(int argc, char **argv) {
    return llmkv_cli::cli_main(argc, argv);
}
