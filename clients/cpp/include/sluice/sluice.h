// Sluice's C++ client: #include <sluice/sluice.h> (docs/cpp.md).
#pragma once

#include "sluice/client.h"
#include "sluice/errors.h"
#include "sluice/ratelimit.h"
