/* ops.h: the operation -> handler table (ops.c) that main.c gives server_run(). */
#ifndef S3C_OPS_H
#define S3C_OPS_H

#include "http/req.h"

extern const struct handler *const ops_handlers[OP__N];

#endif
