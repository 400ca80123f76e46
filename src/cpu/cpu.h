/* CPU reference backend: ingot_cpu_<op> for every op of core/ops.h. */
#ifndef INGOT_CPU_CPU_H
#define INGOT_CPU_CPU_H

#include "core/internal.h"

#define INGOT_CPU_PROTOTYPE(op, params) ingot_status ingot_cpu_##op params;
INGOT_BACKEND_OPS(INGOT_CPU_PROTOTYPE)
#undef INGOT_CPU_PROTOTYPE

#endif /* INGOT_CPU_CPU_H */
