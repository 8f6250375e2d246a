#include "trace/trace-hw_i386_hvstor.h"
