// Fixture: a backend reaching up into parallel/, which includes the backend interface: a loop.
#include "parallel/ranks.h"
