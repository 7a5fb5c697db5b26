// Fixture: the engine naming a concrete backend breaks the rules.
#include "backend/cpu/matmul.h"
