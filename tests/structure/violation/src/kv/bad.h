// Fixture: kv/ reaching into a model header breaks the rules.
#include "model/gguf.h"
