// Fixture: parallel/ may include the backend interface (the other half of the loop).
#include "backend/backend.h"
