// The module is its header (`include/CPrefetch.h`, inlined where it is called); SwiftPM
// builds a C target from at least one source file.
#include "CPrefetch.h"
